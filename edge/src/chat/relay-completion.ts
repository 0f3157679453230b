import { Readable } from "node:stream";
import { status as grpcStatus, type ClientDuplexStream, type StatusObject } from "@grpc/grpc-js";
import type { FastifyReply } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import type { ChatCompletionRequest, ChatCompletionResponse } from "@mkt/proto/registry/v1/registry";
import type { AnswerFormat } from "./answer-format.ts";
import { RelayedOutput } from "./relayed-output.ts";

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
 * Reads what is left of the call up to its status without cancelling it (every cancel is an
 * HTTP/2 RST_STREAM, and a peer resetting streams at hundreds per second trips Node's rapid-reset
 * guard, which closes the whole connection). Returns the error event registry sent after its
 * `end`, if any: its shutdown grace ended before the half-close reached it, so the answer was not
 * recorded whole.
 */
async function drain(events: AsyncIterator<ChatCompletionResponse>): Promise<AppError | undefined> {
  let cut: AppError | undefined;
  try {
    for (let step = await events.next(); !step.done; step = await events.next()) {
      if (step.value.error) cut ??= AppError.fromCode(step.value.error.code, step.value.error.message);
    }
  } catch {
    // the status is an error: the caller reads it from the status event
  }
  return cut;
}

/**
 * Answers the client from the registry's ChatCompletion stream. Nothing is sent until the first
 * event arrives, so a failure before it is an ordinary HTTP error; after it, a streamed answer ends
 * with an error event (never a silent truncation). A client that goes away cancels the call, which
 * aborts the upstream request. When `shutdown` aborts (the edge's grace period is over), the call is
 * cancelled and the answer ends with a `service_unavailable` error event.
 *
 * A whole answer ends in two steps (docs/decisions.md, "Answers that did not reach their client
 * whole"): on registry's `end` event, with its client still connected, the edge half-closes the
 * call, registry makes the usage event durable (a success) and ends the call; only on that OK
 * does the client get the answer's last bytes (`[DONE]`, or the non-streamed body). So a client
 * gone before is a cancelled call (`client_cancelled`, billed what was sent), and no client holds
 * a whole answer whose usage a registry crash could lose: it gets an error instead.
 *
 * A streamed answer whose call fails on registry's side (registry died or the connection broke:
 * any status but OK and the edge's own cancel) after chunks were relayed goes to `onCut` with
 * those chunks, so its usage is recorded although registry could not (cut-answers.ts).
 */
export async function relayCompletion(
  call: Call,
  reply: FastifyReply,
  options: {
    stream: boolean;
    /** Chat completions as they are, or translated (the Responses API). */
    format: AnswerFormat;
    /** Cancels the call (the edge's shutdown grace is over, or it is cut off from billing). */
    shutdown?: AbortSignal;
    /** Called once the first event is in, before anything is sent (the edge's metrics time it). */
    onFirstEvent?: () => void;
    /** A streamed answer cut by registry's failure, with what was relayed and the error code its client got. */
    onCut?: (relayed: RelayedOutput, errorCode: string) => void;
  },
): Promise<FastifyReply> {
  const cancel = () => call.cancel();
  const { shutdown } = options;
  // A call cancelled by shutdown says so, rather than "The request was cancelled.": the signal's
  // reason when it has one to tell (an edge cut off from billing), or that the server stops.
  const failure = (err: unknown) =>
    shutdown?.aborted
      ? shutdown.reason instanceof AppError
        ? shutdown.reason
        : new AppError("service_unavailable", SHUTTING_DOWN)
      : AppError.fromGrpc(err);
  const ended = new Promise<StatusObject>((resolve) => call.once("status", resolve));
  const relayed = options.stream && options.onCut ? new RelayedOutput() : undefined;
  if (relayed) {
    void ended.then((status) => {
      if (status.code === grpcStatus.OK || status.code === grpcStatus.CANCELLED) return;
      options.onCut!(relayed, failure(Object.assign(new Error(status.details), status)).code);
    });
  }
  reply.raw.once("close", cancel);
  shutdown?.addEventListener("abort", cancel, { once: true });
  if (shutdown?.aborted) cancel();
  const stopWatching = () => {
    reply.raw.off("close", cancel);
    shutdown?.removeEventListener("abort", cancel);
  };
  const events = call[Symbol.asyncIterator]() as AsyncIterator<ChatCompletionResponse>;

  /** The answer is whole and its client connected: half-close, then wait for registry's OK. */
  const confirm = async (): Promise<void> => {
    if (reply.raw.destroyed) {
      call.cancel(); // registry records client_cancelled
      throw new AppError("service_unavailable", "The client left before its answer was complete.");
    }
    call.end();
    const [cut, status] = await Promise.all([drain(events), ended]);
    if (status.code !== grpcStatus.OK) throw failure(Object.assign(new Error(status.details), status));
    if (cut) throw cut;
  };

  let first: ChatCompletionResponse | undefined;
  try {
    first = await next(events);
    if (first) options.onFirstEvent?.();
  } catch (err) {
    stopWatching();
    throw shutdown?.aborted ? failure(err) : err;
  }

  if (!options.stream) {
    try {
      if (first?.error) throw AppError.fromCode(first.error.code, first.error.message);
      if (!first?.completion) throw new AppError("upstream_error", "The model server sent no answer.");
      // Nothing follows a completion but the `end` event and the call's status.
      await confirm();
    } finally {
      stopWatching();
    }
    return reply.type("application/json").send(options.format.completion(first.completion));
  }

  if (!first) throw new AppError("upstream_error", "The model server sent no answer.");
  const { format } = options;
  async function* frames(): AsyncGenerator<string | Buffer> {
    let confirming = false;
    try {
      for (let event: ChatCompletionResponse | undefined = first; event; event = await next(events)) {
        // Chunks that arrived together leave in one write (a translation may have nothing to say).
        const chunks = event.chunk ? [event.chunk] : event.chunks?.chunks;
        if (chunks) {
          relayed?.add(chunks);
          const frames = format.chunks(chunks);
          if (frames.length > 0) yield frames;
        } else if (event.end) {
          confirming = true;
          await confirm();
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
      yield format.failure(err instanceof AppError ? err : failure(err));
    } finally {
      stopWatching();
      if (!confirming) call.cancel();
    }
  }
  return reply
    .header("content-type", "text/event-stream; charset=utf-8")
    .header("cache-control", "no-cache")
    .header("x-accel-buffering", "no")
    .send(Readable.from(frames(), { objectMode: false }));
}
