import { isUuid } from "@mkt/runtime/ids";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { isModelId } from "./registration-request.ts";
import type { EndpointFigures } from "@mkt/proto/registry/v1/registry";

/**
 * Live figures per endpoint (a hoster's model), from the edges' usage events: per minute, counts
 * and histograms, so that any window's figures are sums of its minutes (replicas and batches add
 * up in one upsert) and its percentiles come from the summed histograms, never from a sample kept
 * per request.
 */

/** Upper bounds (ms) of the latency and time-to-first-token buckets; the last is open. */
export const MS_BUCKETS = [
  50,
  100,
  200,
  300,
  500,
  750,
  1_000,
  1_500,
  2_000,
  3_000,
  5_000,
  7_500,
  10_000,
  15_000,
  20_000,
  30_000,
  60_000,
  120_000,
  Infinity,
] as const;
/** Upper bounds of the output tokens per second buckets; the last is open. */
export const TPS_BUCKETS = [1, 2, 5, 10, 15, 20, 30, 40, 50, 75, 100, 150, 200, 300, 500, 1_000, Infinity] as const;

/** One endpoint's minute, as stored (endpoint_minutes) and as a batch adds to it. */
export interface EndpointMinute {
  hosterId: string;
  modelId: string;
  /** The minute's start. */
  minute: Date;
  requests: number;
  successes: number;
  faults: number;
  upstream429s: number;
  latencyHist: number[];
  ttftHist: number[];
  tpsHist: number[];
}

/**
 * What an answer says of its hoster. A 429 from the upstream is its own kind (the hoster's
 * capacity, not its failure); a 5xx, a timeout or a stream that broke is a fault; a client's
 * error (a 4xx passed on, a refusal before the call, a caller that left) is neither.
 */
export function outcomeOf(event: UsageCompleted): "success" | "fault" | "upstream_429" | "other" {
  if (event.upstreamStatus === 429) return "upstream_429";
  if (event.success) return "success";
  if (event.errorCode === "upstream_error" || event.errorCode === "upstream_timeout" || event.upstreamStatus >= 500) {
    return "fault";
  }
  return "other";
}

const bucketOf = (bounds: readonly number[], value: number) => bounds.findIndex((bound) => value <= bound);

/** The minutes a batch of events adds to, one per endpoint and minute (hoster events only). */
export function minutesOf(events: readonly UsageCompleted[], now: Date): EndpointMinute[] {
  const minutes = new Map<string, EndpointMinute>();
  for (const event of events) {
    // Only what could name a registered hoster's model is written: an id that is not a UUID, or
    // a model id no registration accepts, would fail the batch's statement, and every batch after.
    if (event.provider !== "hoster" || !isUuid(event.hosterId) || !isModelId(event.modelId)) continue;
    const at = event.startedAt ? new Date(event.startedAt) : now;
    const minute = new Date(Math.floor((Number.isNaN(at.getTime()) ? now : at).getTime() / 60_000) * 60_000);
    const hosterId = event.hosterId.toLowerCase();
    const key = `${hosterId}\n${event.modelId}\n${minute.getTime()}`;
    let row = minutes.get(key);
    if (!row) {
      row = {
        hosterId,
        modelId: event.modelId,
        minute,
        requests: 0,
        successes: 0,
        faults: 0,
        upstream429s: 0,
        latencyHist: MS_BUCKETS.map(() => 0),
        ttftHist: MS_BUCKETS.map(() => 0),
        tpsHist: TPS_BUCKETS.map(() => 0),
      };
      minutes.set(key, row);
    }
    row.requests += 1;
    const outcome = outcomeOf(event);
    if (outcome === "success") row.successes += 1;
    else if (outcome === "fault") row.faults += 1;
    else if (outcome === "upstream_429") row.upstream429s += 1;
    if (outcome !== "success") continue;
    const latency = Number(event.latencyMs);
    row.latencyHist[bucketOf(MS_BUCKETS, latency)]! += 1;
    if (event.timeToFirstTokenMs === undefined) continue;
    const ttft = Number(event.timeToFirstTokenMs);
    row.ttftHist[bucketOf(MS_BUCKETS, ttft)]! += 1;
    // Generation speed after the first token: an answer of one token, or one that arrived in the
    // same millisecond, says nothing of it.
    const generatingMs = latency - ttft;
    const tokens = Number(event.outputTokens);
    if (tokens > 1 && generatingMs > 0) row.tpsHist[bucketOf(TPS_BUCKETS, (tokens - 1) / (generatingMs / 1000))]! += 1;
  }
  return [...minutes.values()];
}

/**
 * The value below which a share `p` of the samples lies, as its bucket's upper bound (the open
 * last bucket reports the bound before it); undefined with no sample.
 */
export function percentile(hist: readonly number[], bounds: readonly number[], p: number): number | undefined {
  const total = hist.reduce((a, b) => a + b, 0);
  if (total === 0) return undefined;
  const rank = Math.ceil(p * total);
  let seen = 0;
  for (const [i, n] of hist.entries()) {
    seen += n;
    if (seen >= rank) return Number.isFinite(bounds[i]!) ? bounds[i]! : bounds[i - 1]!;
  }
  return undefined;
}

/** A window's figures from its minutes summed. */
export function figuresOf(sum: Omit<EndpointMinute, "hosterId" | "modelId" | "minute">): EndpointFigures {
  const judged = sum.successes + sum.faults;
  const ms = (hist: number[], p: number) => {
    const value = percentile(hist, MS_BUCKETS, p);
    return value === undefined ? undefined : BigInt(value);
  };
  const tps = percentile(sum.tpsHist, TPS_BUCKETS, 0.5);
  return {
    requests: BigInt(sum.requests),
    successes: BigInt(sum.successes),
    faults: BigInt(sum.faults),
    upstream429s: BigInt(sum.upstream429s),
    uptime: judged === 0 ? undefined : sum.successes / judged,
    latencyP50Ms: ms(sum.latencyHist, 0.5),
    latencyP90Ms: ms(sum.latencyHist, 0.9),
    ttftP50Ms: ms(sum.ttftHist, 0.5),
    ttftP90Ms: ms(sum.ttftHist, 0.9),
    tokensPerSecondP50: tps === undefined ? undefined : BigInt(tps),
  };
}
