import { Readable } from "node:stream";
import type { ClientReadableStream } from "@grpc/grpc-js";
import type { FastifyReply } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import type { ChatCompletionResponse } from "@mkt/proto/registry/v1/registry";
import { SSE_DONE, sseData, sseError } from "./sse.ts";

type Call = ClientReadableStream<ChatCompletionResponse>;

/** Reads the next event of the registry's stream; gRPC failures arrive as AppErrors. */
async function next(events: AsyncIterator<ChatCompletionResponse>): Promise<ChatCompletionResponse | undefined> {
  try {
    const step = await events.next();
    return step.done ? undefined : step.value;
  } catch (err) {
    throw AppError.fromGrpc(err);
  }
}

const completionIdOf = (chunk: Uint8Array | undefined): string | undefined => {
  if (!chunk) return undefined;
  try {
    const id = (JSON.parse(Buffer.from(chunk).toString("utf8")) as { id?: unknown }).id;
    return typeof id === "string" ? id : undefined;
  } catch {
    return undefined;
  }
};

/**
 * Answers the client from the registry's ChatCompletion stream. Nothing is sent until the first
 * event arrives, so a failure before it is an ordinary HTTP error; after it, a streamed answer ends
 * with an error event (never a silent truncation). A client that goes away cancels the call, which
 * aborts the upstream request.
 */
export async function relayCompletion(
  call: Call,
  reply: FastifyReply,
  options: { stream: boolean; model: string; requestId: string },
): Promise<FastifyReply> {
  const cancel = () => call.cancel();
  reply.raw.once("close", cancel);
  const events = call[Symbol.asyncIterator]() as AsyncIterator<ChatCompletionResponse>;
  let first: ChatCompletionResponse | undefined;
  try {
    first = await next(events);
  } catch (err) {
    reply.raw.off("close", cancel);
    throw err;
  }

  if (!options.stream) {
    reply.raw.off("close", cancel);
    if (first?.error) throw AppError.fromCode(first.error.code, first.error.message);
    if (!first?.completion) throw new AppError("upstream_error", "The model server sent no answer.");
    call.cancel(); // nothing follows a completion; do not leave the call open
    return reply.type("application/json").send(Buffer.from(first.completion));
  }

  if (!first) throw new AppError("upstream_error", "The model server sent no answer.");
  let completionId = completionIdOf(first.chunk) ?? `chatcmpl-${options.requestId}`;
  async function* frames(): AsyncGenerator<string> {
    try {
      for (let event: ChatCompletionResponse | undefined = first; event; event = await next(events)) {
        if (event.chunk) {
          completionId = completionIdOf(event.chunk) ?? completionId;
          yield sseData(event.chunk);
        } else if (event.error) {
          yield sseError(AppError.fromCode(event.error.code, event.error.message), options.model, completionId);
          return;
        }
      }
      yield SSE_DONE;
    } catch (err) {
      if (reply.raw.destroyed) return; // the client left; the cancelled call is why we are here
      yield sseError(AppError.fromGrpc(err), options.model, completionId);
    } finally {
      reply.raw.off("close", cancel);
      call.cancel();
    }
  }
  return reply
    .header("content-type", "text/event-stream; charset=utf-8")
    .header("cache-control", "no-cache")
    .header("x-accel-buffering", "no")
    .send(Readable.from(frames(), { objectMode: false }));
}
