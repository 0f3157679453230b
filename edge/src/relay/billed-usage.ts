import { min } from "@mkt/runtime/bigint-math";

/** Token counts an upstream reported in its usage chunk, untrusted. */
export interface ReportedUsage {
  promptTokens?: unknown;
  completionTokens?: unknown;
  /** `prompt_tokens_details.cached_tokens`: prompt tokens it served from its prefix cache. */
  cachedTokens?: unknown;
  /** `completion_tokens_details.reasoning_tokens`: completion tokens it spent reasoning. */
  reasoningTokens?: unknown;
}

export interface BilledUsage {
  inputTokens: bigint;
  outputTokens: bigint;
  /** Of inputTokens, those served from the upstream's prompt cache (priced at the cached price). */
  cachedInputTokens: bigint;
  /** Of outputTokens, those spent reasoning (priced as output; shown). */
  reasoningTokens: bigint;
}

/** Nothing billed: a request that failed before any output. */
export const NOTHING_BILLED: BilledUsage = {
  inputTokens: 0n,
  outputTokens: 0n,
  cachedInputTokens: 0n,
  reasoningTokens: 0n,
};

/** Reads the usage object of an upstream's chunk or completion, untrusted. */
export function reportedUsageOf(usage: Record<string, unknown>): ReportedUsage {
  const details = (field: string, count: string): unknown => {
    const holder = usage[field];
    return holder && typeof holder === "object" ? (holder as Record<string, unknown>)[count] : undefined;
  };
  return {
    promptTokens: usage.prompt_tokens,
    completionTokens: usage.completion_tokens,
    cachedTokens: details("prompt_tokens_details", "cached_tokens"),
    reasoningTokens: details("completion_tokens_details", "reasoning_tokens"),
  };
}

/** A token count as a report should carry it: a finite number, not negative; else undefined. */
export function validCount(value: unknown): bigint | undefined {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) return undefined;
  return BigInt(Math.floor(value));
}

/**
 * Usage is not taken on trust (docs/adr/0022-runaway-guard-not-a-cap.md): input is at most what the edge counted, output at
 * most what was delivered and what billing reserved. A missing or nonsensical report falls back
 * to the edge's own counts. Cached input tokens are at most the billed input and reasoning tokens
 * at most the billed output (docs/adr/0039-cached-input-priced-clamped-verified.md); a missing or
 * garbled count is none.
 */
export function billedUsage(args: {
  reported: ReportedUsage | undefined;
  promptTokens: bigint;
  deliveredOutputTokens: bigint;
  maxOutputTokens: bigint;
}): BilledUsage {
  const promptTokens = args.promptTokens < 0n ? 0n : args.promptTokens;
  const delivered = args.deliveredOutputTokens < 0n ? 0n : args.deliveredOutputTokens;
  const cap = args.maxOutputTokens < 0n ? 0n : args.maxOutputTokens;
  const reportedIn = validCount(args.reported?.promptTokens);
  const reportedOut = validCount(args.reported?.completionTokens);
  const inputTokens = reportedIn === undefined ? promptTokens : min(reportedIn, promptTokens);
  const outputTokens = reportedOut === undefined ? min(delivered, cap) : min(reportedOut, delivered, cap);
  return {
    inputTokens,
    outputTokens,
    cachedInputTokens: min(validCount(args.reported?.cachedTokens) ?? 0n, inputTokens),
    reasoningTokens: min(validCount(args.reported?.reasoningTokens) ?? 0n, outputTokens),
  };
}
