import { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { Route } from "@mkt/proto/registry/v1/registry";
import type { ReportedUsage } from "./billed-usage.ts";
import { validCount } from "./billed-usage.ts";
import type { RelayRequest } from "./relay-request.ts";
import type { UsageMismatch } from "./usage-check.ts";

/** How one chat request ended. */
export interface RequestOutcome {
  /** The route that answered (or was tried last); none when the request failed before one. */
  route: Route | undefined;
  inputTokens: bigint;
  outputTokens: bigint;
  /** Of inputTokens, those the upstream served from its prompt cache (billed, clamped). */
  cachedInputTokens: bigint;
  /** Of outputTokens, those spent reasoning (billed, clamped). */
  reasoningTokens: bigint;
  /** '' for a success. */
  errorCode: string;
  /** The answer's finish_reason, `error`, or '' when it has none. */
  finishReason: string;
  /** When (epoch ms) the first choice reached the caller; undefined when none did. */
  firstTokenAt?: number;
  /** The upstream's own usage report, untrusted (kept for the hoster's figures). */
  reported?: ReportedUsage;
  /** The verdict on that report, when the answer was judged. */
  mismatch?: UsageMismatch;
  /** The upstream's HTTP status; 0 when none answered. */
  upstreamStatus?: number;
}

/**
 * The one usage.completed of a chat request: what the edge admitted it with (billing settles it
 * against that lease and worst case) and how it ended. Latency runs from the edge's receipt of
 * the request; a missing or absurd receipt time falls back to `fallbackStart`.
 */
export function usageCompleted(
  request: RelayRequest,
  outcome: RequestOutcome,
  fallbackStart = Date.now(),
): UsageCompleted {
  const { route } = outcome;
  const edgeMs = Number(request.receivedAtMs);
  const receivedAt = edgeMs > 0 && edgeMs <= Date.now() + 60_000 ? edgeMs : fallbackStart;
  return UsageCompleted.fromPartial({
    requestId: request.requestId,
    accountId: request.accountId,
    keyId: request.keyId,
    modelId: route?.modelId ?? "",
    provider: route?.provider ?? "",
    hosterId: route?.hosterId ?? "",
    inputTokens: outcome.inputTokens,
    outputTokens: outcome.outputTokens,
    latencyMs: BigInt(Math.max(0, Date.now() - receivedAt)),
    timeToFirstTokenMs:
      outcome.firstTokenAt === undefined ? undefined : BigInt(Math.max(0, outcome.firstTokenAt - receivedAt)),
    finishReason: outcome.finishReason,
    success: outcome.errorCode === "",
    errorCode: outcome.errorCode,
    startedAt: new Date(receivedAt).toISOString(),
    // Settled against the lease the edge admitted the request on.
    leaseId: request.leaseId,
    worstCaseMicros: request.worstCaseMicros,
    worstCaseTokens: request.worstCaseTokens,
    subscriptionId: request.subscriptionId,
    includedTokens: request.includedTokens,
    inputPricePer1mMicros: route?.inputPricePer1mMicros ?? 0n,
    outputPricePer1mMicros: route?.outputPricePer1mMicros ?? 0n,
    cachedInputPricePer1mMicros: route?.cachedInputPricePer1mMicros,
    cachedInputTokens: outcome.cachedInputTokens,
    reasoningTokens: outcome.reasoningTokens,
    reportedInputTokens: reportedCount(outcome.reported?.promptTokens),
    reportedOutputTokens: reportedCount(outcome.reported?.completionTokens),
    reportedCachedTokens: reportedCount(outcome.reported?.cachedTokens),
    usageMismatch: outcome.mismatch ?? "",
    upstreamStatus: outcome.upstreamStatus ?? 0,
  });
}

/** A report's count as an int64 (garbage and absurd values are left out; the verdict says why). */
function reportedCount(value: unknown): bigint | undefined {
  const count = validCount(value);
  return count !== undefined && count <= BigInt(Number.MAX_SAFE_INTEGER) ? count : undefined;
}
