/**
 * Streaming load: n chat completions with "stream": true started at once, each on its own
 * connection, read as server-sent events: time to the first content token, the usage chunk,
 * whether [DONE] arrived. Only the lines needed are parsed (JSON.parse until the first content
 * delta, then only the usage and error events), so the client spends little CPU per token.
 */
import type { Pool } from "undici";
import { headerOf, newRecord, postChat, type RequestRecord, type Target } from "./load.ts";

interface Chunk {
  choices?: Array<{ delta?: { content?: string | null } }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number };
  error?: unknown;
}

async function oneStream(
  pool: Pool,
  target: Target,
  connection: number,
  body: string,
  scenario: string,
  warmup: boolean,
  timeoutMs: number,
): Promise<RequestRecord> {
  const record = newRecord(target, connection, scenario, warmup);
  const start = record.start;
  try {
    const res = await postChat(pool, target, connection, body, AbortSignal.timeout(timeoutMs));
    record.status = res.statusCode;
    record.requestId = headerOf(res.headers["x-request-id"]);
    if (res.statusCode !== 200) {
      record.error = (await res.body.text()).slice(0, 200);
    } else {
      res.body.setEncoding("utf8");
      let pending = "";
      for await (const piece of res.body as AsyncIterable<string>) {
        pending += piece;
        let newline: number;
        while ((newline = pending.indexOf("\n")) !== -1) {
          const line = pending.slice(0, newline).trimEnd();
          pending = pending.slice(newline + 1);
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") {
            record.complete = !record.serverError;
            continue;
          }
          // Content is JSON-escaped, so an unescaped `"usage":` or `"error":` is the real field.
          if (record.ttftMs === undefined || data.includes('"usage":{') || data.includes('"error":')) {
            const chunk = JSON.parse(data) as Chunk;
            if (record.ttftMs === undefined && chunk.choices?.[0]?.delta?.content) {
              record.ttftMs = performance.now() - start;
            }
            if (chunk.usage) {
              record.promptTokens = chunk.usage.prompt_tokens;
              record.completionTokens = chunk.usage.completion_tokens;
            }
            if (chunk.error) {
              record.serverError = true;
              record.error = JSON.stringify(chunk.error).slice(0, 200);
            }
          }
        }
      }
    }
  } catch (err) {
    record.error = (err as Error).message;
    record.complete = false;
  }
  record.latencyMs = performance.now() - start;
  return record;
}

/**
 * Opens up to `count` connections by sending that many cheap GETs at once (the pool makes a new
 * connection for each request it cannot give to an idle one). Without it the measured streams
 * would open 1,000 connections at the same instant, and the servers' listen backlog (511 in Node)
 * would leave the rest to the kernel's SYN retransmission (1 s, 3 s …): TTFT would measure TCP
 * connection set-up on every target instead of what the gateway adds.
 */
export async function preconnect(pool: Pool, target: Target, count: number): Promise<void> {
  await Promise.all(
    Array.from({ length: count }, () =>
      pool
        .request({ method: "GET", path: target.healthPath })
        .then((res) => res.body.dump())
        .catch(() => undefined),
    ),
  );
}

/** `count` streams started together on connections 0…count-1. */
export async function streamsAtOnce(
  pool: Pool,
  target: Target,
  options: { count: number; body: string; scenario: string; warmup: boolean; timeoutMs: number },
): Promise<RequestRecord[]> {
  return Promise.all(
    Array.from({ length: options.count }, (_, i) =>
      oneStream(pool, target, i, options.body, options.scenario, options.warmup, options.timeoutMs),
    ),
  );
}
