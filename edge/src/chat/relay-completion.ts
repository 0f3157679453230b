import { Readable } from "node:stream";
import type { FastifyReply } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import type { RelayEvent } from "../relay/relay-answer.ts";
import type { AnswerFormat } from "./answer-format.ts";

type Events = AsyncGenerator<RelayEvent, void, undefined>;

/**
 * Answers the client from the relay's events. Nothing is sent until the first event arrives, so a
 * failure before it (no server answered, a timeout) is an ordinary HTTP error; after it, a
 * streamed answer ends with an error event (never a silent truncation). The relay reads the
 * upstream no faster than the client takes the frames, and a client that goes away stops it (the
 * route's `clientGone` signal, chat-call.ts). A whole answer's last bytes come only once its
 * usage event is durable: the relay's `end` event (or the completion) says so.
 */
export async function relayCompletion(
  events: Events,
  reply: FastifyReply,
  options: {
    stream: boolean;
    /** Chat completions as they are, or translated (the Responses API). */
    format: AnswerFormat;
    /** Called once the first event is in, before anything is sent (the edge's metrics time it). */
    onFirstEvent?: () => void;
  },
): Promise<FastifyReply> {
  let first: RelayEvent | undefined;
  try {
    const step = await events.next();
    first = step.done ? undefined : step.value;
  } catch (err) {
    await events.return();
    throw err;
  }
  if (first) options.onFirstEvent?.();
  const { format } = options;

  if (!options.stream) {
    // Nothing follows a completion: the generator ends (its usage is already durable).
    await events.return();
    if (!first) throw new AppError("upstream_error", "The model server sent no answer.");
    if ("error" in first) throw first.error;
    if (!("completion" in first)) throw new AppError("upstream_error", "The model server sent no answer.");
    return reply.type("application/json").send(format.completion(first.completion));
  }

  if (!first) {
    await events.return();
    throw new AppError("upstream_error", "The model server sent no answer.");
  }
  async function* frames(): AsyncGenerator<string> {
    try {
      for (let event: RelayEvent | undefined = first; event;) {
        if ("chunks" in event) {
          // Chunks read together leave in one write (a translation may have nothing to say).
          const text = format.chunks(event.chunks);
          if (text !== "") yield text;
        } else if ("end" in event) {
          yield format.end();
          return;
        } else if ("error" in event) {
          yield format.failure(event.error);
          return;
        }
        const step = await events.next();
        event = step.done ? undefined : step.value;
      }
      // The relay ended without `end` or an error: the answer is not whole.
      yield format.failure(new AppError("upstream_error", "The model server's answer ended early."));
    } catch (err) {
      if (reply.raw.destroyed) return;
      yield format.failure(err instanceof AppError ? err : new AppError("internal_error", "Internal error."));
    } finally {
      // The client left (the stream was destroyed) or the answer ended: the relay records it.
      await events.return();
    }
  }
  return reply
    .header("content-type", "text/event-stream; charset=utf-8")
    .header("cache-control", "no-cache")
    .header("x-accel-buffering", "no")
    .send(Readable.from(frames(), { objectMode: false }));
}
