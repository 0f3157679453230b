/**
 * Streaming load: chat completions with "stream": true, started all at once or at a steady rate,
 * each on its own connection, read as server-sent events: time to the first content token, the usage chunk,
 * whether [DONE] arrived. Only the lines needed are parsed (JSON.parse until the first content
 * delta, then only the usage and error events), so the client spends little CPU per token.
 */
import { setTimeout as sleep } from "node:timers/promises";
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
    const res = await postChat(pool, target, record.key, body, AbortSignal.timeout(timeoutMs));
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

/**
 * Open-loop arrivals: stream i starts at i / `ratePerSecond` seconds from the start, whether or
 * not earlier streams have finished, for `seconds` (on connection i, so ours spreads the keys as
 * in the other scenarios). A closed loop would slow its arrivals down as the target slows, hiding
 * the queueing a steady stream of new clients meets. Due times are absolute, so a late timer
 * starts every overdue stream at once rather than shifting the rest of the schedule; `lagMs` says
 * how late each start was (the load generator shares the cores with the target).
 */
export async function streamsArriving(
  pool: Pool,
  target: Target,
  options: { ratePerSecond: number; seconds: number; body: string; scenario: string; timeoutMs: number },
): Promise<{ records: RequestRecord[]; lagMs: number[] }> {
  const count = arrivalCount(options.ratePerSecond, options.seconds);
  const intervalMs = 1000 / options.ratePerSecond;
  const started = performance.now();
  const streams: Array<Promise<RequestRecord>> = [];
  const lagMs: number[] = [];
  for (let i = 0; i < count; i++) {
    const due = started + i * intervalMs;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    lagMs.push(performance.now() - due);
    streams.push(oneStream(pool, target, i, options.body, options.scenario, false, options.timeoutMs));
  }
  return { records: await Promise.all(streams), lagMs };
}

/** How many streams an arrival run starts. */
export const arrivalCount = (ratePerSecond: number, seconds: number): number => Math.round(ratePerSecond * seconds);
