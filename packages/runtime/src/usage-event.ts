import { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { ChatCompletionRequest, Route } from "@mkt/proto/registry/v1/registry";

/** How one chat request ended. */
export interface RequestOutcome {
  /** The route that answered (or was tried last); none when the request failed before one. */
  route: Route | undefined;
  inputTokens: bigint;
  outputTokens: bigint;
  /** '' for a success. */
  errorCode: string;
  /** The answer's finish_reason, `error`, or '' when it has none. */
  finishReason: string;
  /** When (epoch ms) the first choice reached the caller; undefined when none did. */
  firstTokenAt?: number;
}

/**
 * The one usage.completed of a chat request: what the edge admitted it with, copied from its
 * ChatCompletionRequest (billing settles it against that lease and worst case), and how it ended.
 * Registry publishes it for every answer it lives through; the edge for an answer registry's
 * death cut (edge/src/chat/cut-answers.ts). Latency runs from the edge's receipt of the request;
 * a missing or absurd receipt time falls back to `fallbackStart`.
 */
export function usageCompleted(
  request: ChatCompletionRequest,
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
    // Settled against the lease the edge admitted the request on (DESIGN.md §2.3).
    leaseId: request.leaseId,
    worstCaseMicros: request.worstCaseMicros,
    worstCaseTokens: request.worstCaseTokens,
    subscriptionId: request.subscriptionId,
    includedTokens: request.includedTokens,
    inputPricePer1mMicros: route?.inputPricePer1mMicros ?? 0n,
    outputPricePer1mMicros: route?.outputPricePer1mMicros ?? 0n,
  });
}
