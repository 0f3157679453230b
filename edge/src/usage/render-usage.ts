import type { UsageFigures } from "@mkt/proto/billing/v1/billing";
import { microsToUsd } from "@mkt/runtime/money";

const NONE: UsageFigures = {
  requests: 0n,
  inputTokens: 0n,
  outputTokens: 0n,
  costMicros: 0n,
  latencyMsSum: 0n,
  cachedInputTokens: 0n,
};

/** Every request counts in the average, failed ones included. */
export function avgLatencyMs(figures: UsageFigures = NONE): number {
  return figures.requests > 0n ? Number(figures.latencyMsSum) / Number(figures.requests) : 0;
}

/**
 * The token and cost fields shared by totals and series entries; `cached_input_tokens` are a part
 * of `input_tokens` (served from the upstream's prompt cache, priced at the cached price).
 */
export function renderFigures(figures: UsageFigures = NONE) {
  return {
    input_tokens: Number(figures.inputTokens),
    cached_input_tokens: Number(figures.cachedInputTokens),
    output_tokens: Number(figures.outputTokens),
    total_tokens: Number(figures.inputTokens + figures.outputTokens),
    cost_usd: microsToUsd(figures.costMicros),
    requests: Number(figures.requests),
  };
}
