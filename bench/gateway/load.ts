/**
 * The load generator: undici Pools (one per target and run, `connections` sockets) and a closed
 * loop of workers, each sending its next request as soon as the previous answer has been read.
 * Every request is recorded, warm-up included: what was sent to our system is checked against
 * the bench database afterwards (verify.ts), so nothing sent may go unrecorded.
 */
import { Pool } from "undici";

export type TargetName = "direct" | "ours" | "peer";

export interface Target {
  name: TargetName;
  origin: string;
  path: string;
  /** A cheap GET on the same server, used to open connections before a measured run. */
  healthPath: string;
  /** Headers of the request with key slot `key` (ours sends it with account `key % accounts`). */
  headers(key: number): Record<string, string>;
}

export interface RequestRecord {
  target: TargetName;
  scenario: string;
  warmup: boolean;
  /** Which connection (worker) sent it. */
  connection: number;
  /**
   * Its key slot: ours sent it with account `key % accounts`. Every request takes the next slot,
   * so an account's requests are spread in time among the others', as a marketplace's are (a
   * connection keeping one account would make every account a busy one).
   */
  key: number;
  /** performance.now() when sent, ms. */
  start: number;
  latencyMs: number;
  /** HTTP status; 0 when no response came (connection error, timeout). */
  status: number;
  /** Our edge's x-request-id (absent from the other targets). */
  requestId: string | undefined;
  promptTokens: number | undefined;
  completionTokens: number | undefined;
  /** A whole answer arrived: a JSON completion with usage, or a stream ending in [DONE]. */
  complete: boolean;
  /** The server said it failed after answering 200 (an error event in a stream). */
  serverError: boolean;
  /** Streams: time to the first non-empty content delta, ms. */
  ttftMs?: number;
  error?: string;
}

interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
}

export const chatBody = (model: string, stream: boolean): string =>
  JSON.stringify({
    model,
    messages: [{ role: "user", content: "Tell me something about benchmarks." }],
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  });

export function openPool(target: Target, connections: number): Pool {
  return new Pool(target.origin, {
    connections,
    pipelining: 1,
    keepAliveTimeout: 60_000,
    headersTimeout: 120_000,
    bodyTimeout: 120_000,
  });
}

export const headerOf = (value: string | string[] | undefined): string | undefined =>
  Array.isArray(value) ? value[0] : value;

let nextKey = 0;

/**
 * The record of one request about to be sent: nothing known yet but when it started, and its key
 * slot (the next one, unless the caller picks it).
 */
export function newRecord(
  target: Target,
  connection: number,
  scenario: string,
  warmup: boolean,
  key = nextKey++,
): RequestRecord {
  return {
    target: target.name,
    scenario,
    warmup,
    connection,
    key,
    start: performance.now(),
    latencyMs: 0,
    status: 0,
    requestId: undefined,
    promptTokens: undefined,
    completionTokens: undefined,
    complete: false,
    serverError: false,
  };
}

/** POSTs a chat body to the target with the headers of key slot `key`. */
export function postChat(pool: Pool, target: Target, key: number, body: string, signal?: AbortSignal) {
  return pool.request({
    method: "POST",
    path: target.path,
    headers: { "content-type": "application/json", ...target.headers(key) },
    body,
    signal,
  });
}

/** One non-streaming chat completion, recorded whatever happens. */
export async function sendOne(
  pool: Pool,
  target: Target,
  connection: number,
  body: string,
  scenario: string,
  warmup: boolean,
  key?: number,
): Promise<RequestRecord> {
  const record = newRecord(target, connection, scenario, warmup, key);
  const start = record.start;
  try {
    const res = await postChat(pool, target, record.key, body);
    record.status = res.statusCode;
    record.requestId = headerOf(res.headers["x-request-id"]);
    const text = await res.body.text();
    if (res.statusCode === 200) {
      const usage = (JSON.parse(text) as { usage?: Usage }).usage;
      record.promptTokens = usage?.prompt_tokens;
      record.completionTokens = usage?.completion_tokens;
      record.complete = usage !== undefined;
    } else {
      record.error = text.slice(0, 200);
    }
  } catch (err) {
    record.error = (err as Error).message;
  }
  record.latencyMs = performance.now() - start;
  return record;
}

/**
 * `connections` workers sending back to back until `durationMs` has passed (a request running
 * at the deadline is finished and kept). Returns every request's record and the run's length.
 */
export async function closedLoop(
  pool: Pool,
  target: Target,
  options: { connections: number; durationMs: number; body: string; scenario: string; warmup: boolean },
): Promise<{ records: RequestRecord[]; seconds: number }> {
  const records: RequestRecord[] = [];
  const started = performance.now();
  const deadline = started + options.durationMs;
  const worker = async (connection: number) => {
    while (performance.now() < deadline) {
      records.push(await sendOne(pool, target, connection, options.body, options.scenario, options.warmup));
    }
  };
  await Promise.all(Array.from({ length: options.connections }, (_, i) => worker(i)));
  return { records, seconds: (performance.now() - started) / 1000 };
}
