import { Readable } from "node:stream";
import type { ClientDuplexStream } from "@grpc/grpc-js";
import type { FastifyReply } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import type { ChatCompletionRequest, ChatCompletionResponse } from "@mkt/proto/registry/v1/registry";
import type { AnswerFormat } from "./answer-format.ts";

type Call = ClientDuplexStream<ChatCompletionRequest, ChatCompletionResponse>;

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
 * Reads what is left of the call (its status) without cancelling it: every cancel is an HTTP/2
 * RST_STREAM, and a peer resetting streams at hundreds per second trips Node's rapid-reset guard,
 * which closes the whole connection (every call on it fails).
 */
async function drain(events: AsyncIterator<ChatCompletionResponse>): Promise<void> {
  try {
    while (!(await events.next()).done);
  } catch {
    // the status is an error: registry has recorded the outcome already
  }
}

/**
 * Answers the client from the registry's ChatCompletion stream. Nothing is sent until the first
 * event arrives, so a failure before it is an ordinary HTTP error; after it, a streamed answer ends
 * with an error event (never a silent truncation). A client that goes away cancels the call, which
 * aborts the upstream request. When `shutdown` aborts (the edge's grace period is over), the call is
 * cancelled and the answer ends with a `service_unavailable` error event. Once the whole answer
 * has been handed to the client's connection (the response's `finish`), the call is half-closed:
 * registry records the answer a success only then (a client gone before is a cancelled call).
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
  // 'finish' comes before 'close' when the response was written whole; only a whole answer's
  // response half-closes (an error event's leaves the call to end by itself).
  let whole = false;
  reply.raw.once("finish", () => {
    if (!whole) return;
    reply.raw.off("close", cancel);
    call.end();
  });
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
    shutdown?.removeEventListener("abort", cancel);
    if (!first?.completion) {
      reply.raw.off("close", cancel);
      if (first?.error) throw AppError.fromCode(first.error.code, first.error.message);
      throw new AppError("upstream_error", "The model server sent no answer.");
    }
    // Nothing follows a completion but the `end` event and the call's status, read, not cancelled.
    whole = true;
    void drain(events);
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
        } else if (event.end) {
          whole = true;
          yield format.end();
          return;
        } else if (event.error) {
          yield format.failure(AppError.fromCode(event.error.code, event.error.message));
          return;
        }
      }
      // The call ended without `end` or an error: the answer is not whole.
      yield format.failure(new AppError("upstream_error", "The model server's answer ended early."));
    } catch (err) {
      if (reply.raw.destroyed) return; // the client left; the cancelled call is why we are here
      yield format.failure(failure(err));
    } finally {
      shutdown?.removeEventListener("abort", cancel);
      if (whole) {
        void drain(events); // half-closed on the response's finish; then comes the status
      } else {
        reply.raw.off("close", cancel);
        call.cancel();
      }
    }
  }
  return reply
    .header("content-type", "text/event-stream; charset=utf-8")
    .header("cache-control", "no-cache")
    .header("x-accel-buffering", "no")
    .send(Readable.from(frames(), { objectMode: false }));
}
