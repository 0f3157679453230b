import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { randomToken } from "@mkt/runtime/ids";

type Json = Record<string, unknown>;

/** One chat request as the upstream received it: the parsed JSON body and its bearer header. */
export interface RecordedCall {
  body: Json;
  authorization: string | undefined;
}

/** A user message containing this makes the upstream answer 500 before any byte of an answer. */
export const FAIL_BEFORE_ANSWER = "[[upstream: fail before answering]]";
/** A user message containing this makes the upstream send one chunk and then drop the connection. */
export const FAIL_MID_STREAM = "[[upstream: fail mid-stream]]";
/** What the failing upstream puts in its error body: it must never reach a client. */
export const UPSTREAM_SECRET = "upstream-internal-detail-7f3a";

/** The tool call the upstream answers with when the request offers tools (arguments split in two deltas). */
export const toolCallOf = (choice: number, name: string) => ({
  id: `call_${choice}_recorded`,
  type: "function" as const,
  function: { name, arguments: `{"city":"Paris","choice":${choice}}` },
});

/** The text the upstream answers choice `choice` with (JSON when a response_format asks for it). */
export const contentOf = (choice: number, body: Json) => {
  const format = (body.response_format as { type?: unknown } | undefined)?.type;
  return format === "json_schema" || format === "json_object"
    ? `{"answer":"choice ${choice}","ok":true}`
    : `Choice ${choice}: recorded and answered.`;
};

/** The usage the upstream reports (small, so the registry's clamp to its own counts keeps it). */
const REPORTED_USAGE = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 };

/**
 * A tiny OpenAI-compatible chat server that records every request body it receives and answers
 * as OpenAI does: `n` choices, `tool_calls` when the request offers tools (finish_reason
 * `tool_calls`), JSON content when a response_format asks for it, streamed as
 * chat.completion.chunk deltas (with a usage chunk when `stream_options.include_usage`) or as one
 * chat.completion. It does not apply `stop`, `temperature` and the like: it only proves what
 * arrived. Two markers in a user message script failures (FAIL_BEFORE_ANSWER, FAIL_MID_STREAM).
 */
export async function startRecordingUpstream() {
  const token = randomToken(24);
  const calls: RecordedCall[] = [];

  const server = createServer((req, res) => {
    void handle(req, res).catch(() => res.destroy());
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "").split("?")[0];
    if (req.method === "GET" && path === "/health") return json(res, 200, { status: "ok" });
    if (req.headers.authorization !== `Bearer ${token}`) {
      return json(res, 401, { error: { message: "bad token", type: "invalid_request_error" } });
    }
    if (req.method === "GET" && path === "/v1/models") {
      return json(res, 200, { object: "list", data: [{ id: "recorded-upstream", object: "model" }] });
    }
    if (req.method !== "POST" || path !== "/v1/chat/completions") return json(res, 404, { error: { message: "?" } });

    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Json;
    calls.push({ body, authorization: req.headers.authorization });

    const said = JSON.stringify(body.messages ?? []);
    if (said.includes(FAIL_BEFORE_ANSWER)) {
      return json(res, 500, { error: { message: `backend exploded: ${UPSTREAM_SECRET}`, type: "server_error" } });
    }
    const id = `chatcmpl-rec${randomToken(6)}`;
    const created = Math.floor(Date.now() / 1000);
    const model = String(body.model);
    const n = typeof body.n === "number" ? body.n : 1;
    const tools = Array.isArray(body.tools) ? (body.tools as Array<{ function?: { name?: string } }>) : [];
    const toolName = tools[0]?.function?.name;
    const finishReason = toolName ? "tool_calls" : "stop";
    const choices = Array.from({ length: n }, (_, i) => i);

    if (body.stream !== true) {
      return json(res, 200, {
        id,
        object: "chat.completion",
        created,
        model,
        choices: choices.map((i) => ({
          index: i,
          message: toolName
            ? { role: "assistant", content: null, tool_calls: [toolCallOf(i, toolName)] }
            : { role: "assistant", content: contentOf(i, body) },
          logprobs: null,
          finish_reason: finishReason,
        })),
        usage: REPORTED_USAGE,
      });
    }

    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    const send = (payload: Json) =>
      res.write(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model, ...payload })}\n\n`);
    const delta = (index: number, d: Json, finish: string | null = null) =>
      send({ choices: [{ index, delta: d, logprobs: null, finish_reason: finish }] });

    for (const i of choices) delta(i, { role: "assistant", content: toolName ? null : "" });
    if (said.includes(FAIL_MID_STREAM)) {
      delta(0, { content: "Partial answer" });
      // Let the chunks leave, then drop the connection without [DONE].
      setTimeout(() => res.destroy(), 50);
      return;
    }
    for (const i of choices) {
      if (toolName) {
        const call = toolCallOf(i, toolName);
        const args = call.function.arguments;
        const half = Math.floor(args.length / 2);
        // OpenAI's shape: the first delta names the call, later ones append to its arguments.
        delta(i, {
          tool_calls: [
            { index: 0, id: call.id, type: "function", function: { name: call.function.name, arguments: "" } },
          ],
        });
        delta(i, { tool_calls: [{ index: 0, function: { arguments: args.slice(0, half) } }] });
        delta(i, { tool_calls: [{ index: 0, function: { arguments: args.slice(half) } }] });
      } else {
        const text = contentOf(i, body);
        const half = Math.floor(text.length / 2);
        delta(i, { content: text.slice(0, half) });
        delta(i, { content: text.slice(half) });
      }
    }
    for (const i of choices) delta(i, {}, finishReason);
    if ((body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true) {
      send({ choices: [], usage: REPORTED_USAGE });
    }
    res.end("data: [DONE]\n\n");
  }

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    token,
    /** Every chat request received since the last call, oldest first; the record is emptied. */
    takeCalls(): RecordedCall[] {
      return calls.splice(0, calls.length);
    },
    close(): Promise<void> {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}
