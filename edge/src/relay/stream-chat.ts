import type { Logger } from "@mkt/runtime/logger";
import type { UpstreamTarget } from "../routing/upstream-target.ts";
import { SseParser } from "./sse-parser.ts";
import type { UpstreamPools } from "./upstream-pools.ts";

/**
 * Bounds of one upstream call (the connect limit belongs to the connection pool). Progress is
 * counted in complete SSE events, not bytes: an upstream dripping a byte at a time, or sending
 * headers, comments or keep-alive blank lines only, makes no progress and is cut at the
 * first-byte or idle bound instead of holding the call until the total one.
 */
export interface UpstreamLimits {
  /** From sending the request to the first complete SSE event (headers alone do not count). */
  firstByteMs: number;
  /** Longest gap between two complete SSE events. */
  idleMs: number;
  /** The whole call. */
  totalMs: number;
  /** Most body bytes read from one response. */
  maxResponseBytes: number;
}

export type UpstreamFailureCode = "upstream_error" | "upstream_timeout" | "client_cancelled";

/** Why an upstream call ended early. Its message is for logs; it never holds the token or body. */
export class UpstreamFailure extends Error {
  override name = "UpstreamFailure";
  readonly code: UpstreamFailureCode;
  /** The upstream's HTTP status, when it answered with an error status. */
  readonly status: number | undefined;

  constructor(code: UpstreamFailureCode, message: string, status?: number) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

const TIMEOUT_CODES = new Set(["UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT"]);

/**
 * How much of a response undici reads ahead of the relay (its default is 64 KiB). A relay that
 * falls behind leaves the rest in the kernel's socket buffer instead of the heap: with a thousand
 * streams, 64 KiB each was ~60 MB of the relay's RSS.
 */
const UPSTREAM_BODY_BUFFER_BYTES = 16 * 1024;

/** The events before `[DONE]` (all of them when it is not among them). */
function untilDone(events: string[]): string[] {
  const done = events.findIndex((data) => data.trim() === "[DONE]");
  return done === -1 ? events : events.slice(0, done);
}

function chatPath(baseUrl: URL): string {
  return `${baseUrl.pathname.replace(/\/+$/, "")}/v1/chat/completions`;
}

/**
 * POSTs a streaming chat request to the upstream and yields the `data` payloads of its SSE events,
 * stopping at `[DONE]`: all the events completed by one read at once, so a relay that fell behind
 * catches up in few, larger steps. Throws UpstreamFailure: client_cancelled when `signal` aborts,
 * upstream_timeout when a deadline passes, upstream_error for anything else (non-2xx,
 * connection failure, an oversized event or body). A consumer that stops early (returns) closes
 * the upstream connection.
 */
export async function* streamChat(
  pools: UpstreamPools,
  target: UpstreamTarget,
  body: Buffer,
  limits: UpstreamLimits,
  signal: AbortSignal,
  log: Logger,
  observe: { onStatus?: (status: number) => void } = {},
): AsyncGenerator<string[], void, undefined> {
  const url = new URL(target.baseUrl);
  const internal = new AbortController();
  let timedOut: string | undefined;
  const expire = (phase: string) => {
    timedOut ??= phase;
    internal.abort();
  };
  const started = Date.now();
  const totalTimer = setTimeout(() => expire("total"), limits.totalMs);
  let phaseTimer: NodeJS.Timeout | undefined;
  // First byte is one deadline across connect, headers and the first event; after that, the gap
  // between events. The timer is stopped while the consumer handles events (a slow client is not
  // the upstream's fault) and re-armed afresh after them.
  const firstByteDeadline = started + limits.firstByteMs;
  let gotFirstEvent = false;
  const armPhase = () => {
    const ms = gotFirstEvent ? limits.idleMs : Math.max(0, firstByteDeadline - Date.now());
    phaseTimer = setTimeout(() => expire(gotFirstEvent ? "idle" : "first_byte"), ms);
  };
  const disarmPhase = () => clearTimeout(phaseTimer);
  const combined = AbortSignal.any([signal, internal.signal]);

  const classify = (err: unknown): UpstreamFailure => {
    if (err instanceof UpstreamFailure) return err;
    if (signal.aborted) return new UpstreamFailure("client_cancelled", "caller cancelled");
    if (timedOut) return new UpstreamFailure("upstream_timeout", `upstream ${timedOut} timeout`);
    const code = (err as { code?: string } | undefined)?.code ?? "";
    if (TIMEOUT_CODES.has(code)) return new UpstreamFailure("upstream_timeout", `upstream timeout (${code})`);
    return new UpstreamFailure("upstream_error", `upstream call failed (${code || (err as Error)?.name})`);
  };

  let sawDone = false;
  let response: Awaited<ReturnType<ReturnType<UpstreamPools["get"]>["request"]>> | undefined;
  try {
    if (signal.aborted) throw new UpstreamFailure("client_cancelled", "caller cancelled");
    armPhase();
    response = await pools.get(url.origin, target.trust).request({
      method: "POST",
      path: chatPath(url),
      headers: {
        "content-type": "application/json",
        accept: "text/event-stream",
        authorization: `Bearer ${target.token}`,
      },
      body,
      signal: combined,
      highWaterMark: UPSTREAM_BODY_BUFFER_BYTES,
    });
    observe.onStatus?.(response.statusCode);
    if (response.statusCode < 200 || response.statusCode > 299) {
      // The body may echo the request or hold upstream internals: drain it, never relay it.
      log.warn({ status: response.statusCode, origin: url.origin }, "upstream answered with an error status");
      await response.body.dump({ limit: 64 * 1024 }).catch(() => undefined);
      throw new UpstreamFailure("upstream_error", `upstream status ${response.statusCode}`, response.statusCode);
    }
    const decoder = new TextDecoder();
    const parser = new SseParser();
    const chunks = response.body[Symbol.asyncIterator]();
    let bytes = 0;
    for (;;) {
      const next = await chunks.next();
      if (next.done) break;
      const piece = next.value as Buffer;
      bytes += piece.length;
      if (bytes > limits.maxResponseBytes) {
        log.warn({ origin: url.origin, bytes }, "upstream response exceeded its size limit");
        throw new UpstreamFailure("upstream_error", "upstream response too large");
      }
      const events = parser.push(decoder.decode(piece, { stream: true }));
      // Bytes that complete no event are no progress: the running deadline keeps running.
      if (events.length === 0) continue;
      disarmPhase();
      gotFirstEvent = true;
      const batch = untilDone(events);
      if (batch.length > 0) yield batch;
      if (batch.length < events.length) {
        sawDone = true;
        return;
      }
      armPhase();
    }
    disarmPhase();
    const rest = untilDone(parser.end());
    if (rest.length > 0) yield rest;
  } catch (err) {
    throw classify(err);
  } finally {
    disarmPhase();
    clearTimeout(totalTimer);
    if (response && !response.body.destroyed) {
      if (sawDone) {
        // The response ends right after [DONE]: read that tail so the connection returns to the
        // pool, and close it if the tail does not come (a plain timer, cleared in the usual case:
        // an AbortSignal.timeout would build a DOMException per call when it fires).
        const body = response.body;
        const tail = setTimeout(() => body.destroy(), 1_000);
        void body
          .dump({ limit: 64 * 1024 })
          .catch(() => undefined)
          .finally(() => clearTimeout(tail));
      } else {
        // Leaving early (cancelled, failed, consumer stopped): close the connection.
        response.body.destroy();
      }
    }
  }
}
