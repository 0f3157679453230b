import { Readable } from "node:stream";
import type { ClientReadableStream } from "@grpc/grpc-js";
import type { FastifyReply } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import type { ChatCompletionResponse } from "@mkt/proto/registry/v1/registry";
import type { AnswerFormat } from "./answer-format.ts";

type Call = ClientReadableStream<ChatCompletionResponse>;

/** What an answer still running when the edge's shutdown grace ends is told. */
const SHUTTING_DOWN = "The server is shutting down; please retry the request.";

/** Reads the next event of the registry's stream; gRPC failures arrive as AppErrors. */
async function next(events: AsyncIterator<ChatCompletionResponse>): Promise<ChatCompletionResponse | undefined> {
  try {
    const step = await events.next();
    return step.done ? undefined : step.value;
  } catch (err) {
    throw AppError.fromGrpc(err);
  }
}

/**
 * Answers the client from the registry's ChatCompletion stream. Nothing is sent until the first
 * event arrives, so a failure before it is an ordinary HTTP error; after it, a streamed answer ends
 * with an error event (never a silent truncation). A client that goes away cancels the call, which
 * aborts the upstream request. When `shutdown` aborts (the edge's grace period is over), the call is
 * cancelled and the answer ends with a `service_unavailable` error event.
 */
export async function relayCompletion(
  call: Call,
  reply: FastifyReply,
  options: {
    stream: boolean;
    /** Chat completions as they are, or translated (the Responses API). */
    format: AnswerFormat;
    shutdown?: AbortSignal;
    /** Called once the first event is in, before anything is sent (the edge's metrics time it). */
    onFirstEvent?: () => void;
  },
): Promise<FastifyReply> {
  const cancel = () => call.cancel();
  const { shutdown } = options;
  // A call cancelled by shutdown says so, rather than "The request was cancelled.".
  const failure = (err: unknown) =>
    shutdown?.aborted ? new AppError("service_unavailable", SHUTTING_DOWN) : AppError.fromGrpc(err);
  reply.raw.once("close", cancel);
  shutdown?.addEventListener("abort", cancel, { once: true });
  if (shutdown?.aborted) cancel();
  const events = call[Symbol.asyncIterator]() as AsyncIterator<ChatCompletionResponse>;
  let first: ChatCompletionResponse | undefined;
  try {
    first = await next(events);
    if (first) options.onFirstEvent?.();
  } catch (err) {
    reply.raw.off("close", cancel);
    shutdown?.removeEventListener("abort", cancel);
    throw shutdown?.aborted ? failure(err) : err;
  }

  if (!options.stream) {
    reply.raw.off("close", cancel);
    shutdown?.removeEventListener("abort", cancel);
    if (first?.error) throw AppError.fromCode(first.error.code, first.error.message);
    if (!first?.completion) throw new AppError("upstream_error", "The model server sent no answer.");
    // Nothing follows a completion but the call's status, which is read, not cancelled: every
    // cancel is an HTTP/2 RST_STREAM, and a peer resetting streams at hundreds per second trips
    // Node's rapid-reset guard, which closes the whole connection (every call on it fails).
    void next(events).catch(() => undefined);
    return reply.type("application/json").send(options.format.completion(first.completion));
  }

  if (!first) throw new AppError("upstream_error", "The model server sent no answer.");
  const { format } = options;
  async function* frames(): AsyncGenerator<string | Buffer> {
    try {
      for (let event: ChatCompletionResponse | undefined = first; event; event = await next(events)) {
        // Chunks that arrived together leave in one write (a translation may have nothing to say).
        const chunks = event.chunk ? [event.chunk] : event.chunks?.chunks;
        if (chunks) {
          const frames = format.chunks(chunks);
          if (frames.length > 0) yield frames;
        } else if (event.error) {
          yield format.failure(AppError.fromCode(event.error.code, event.error.message));
          return;
        }
      }
      yield format.end();
    } catch (err) {
      if (reply.raw.destroyed) return; // the client left; the cancelled call is why we are here
      yield format.failure(failure(err));
    } finally {
      reply.raw.off("close", cancel);
      shutdown?.removeEventListener("abort", cancel);
      call.cancel();
    }
  }
  return reply
    .header("content-type", "text/event-stream; charset=utf-8")
    .header("cache-control", "no-cache")
    .header("x-accel-buffering", "no")
    .send(Readable.from(frames(), { objectMode: false }));
}
