import { min } from "@mkt/runtime/bigint-math";

/** Token counts an upstream reported in its usage chunk, untrusted. */
export interface ReportedUsage {
  promptTokens?: unknown;
  completionTokens?: unknown;
}

export interface BilledUsage {
  inputTokens: bigint;
  outputTokens: bigint;
}

/** A token count as a report should carry it: a finite number, not negative; else undefined. */
export function validCount(value: unknown): bigint | undefined {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) return undefined;
  return BigInt(Math.floor(value));
}

/**
 * Usage is not taken on trust (docs/adr/0022-runaway-guard-not-a-cap.md): input is at most what the edge counted, output at
 * most what was delivered and what billing reserved. A missing or nonsensical report falls back
 * to the edge's own counts.
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
  return {
    inputTokens: reportedIn === undefined ? promptTokens : min(reportedIn, promptTokens),
    outputTokens: reportedOut === undefined ? min(delivered, cap) : min(reportedOut, delivered, cap),
  };
}
