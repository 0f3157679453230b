import { usd, when } from "./format.ts";

/** A key's spend limit as GET /v1/keys shows it. */
export interface KeyLimitView {
  limit_usd: number | null;
  limit_reset: "daily" | "weekly" | "monthly" | null;
  spend_usd: number;
  limit_remaining_usd: number | null;
  limit_resets_at: string | null;
}

const PER = { daily: " per day", weekly: " per week", monthly: " per month" } as const;

/** "$0.42 of $5.00 per day spent, $4.58 left (resets …)", or what a key without a limit spent. */
export function describeLimit(key: KeyLimitView): string {
  if (key.limit_usd === null) return `No limit (${usd(key.spend_usd)} spent)`;
  const per = key.limit_reset ? PER[key.limit_reset] : "";
  const resets = key.limit_resets_at ? `, resets ${when(key.limit_resets_at)}` : "";
  return `${usd(key.spend_usd)} of ${usd(key.limit_usd)}${per} spent, ${usd(key.limit_remaining_usd)} left${resets}`;
}

/**
 * The limit fields of a form as POST/PATCH /v1/keys take them: an empty amount is no limit, an
 * empty reset never resets. An amount that is not a number is refused here (JSON would turn it
 * into null, which means no limit).
 */
export function limitBody(amount: string, reset: string): { limit_usd: number | null; limit_reset: string | null } {
  const trimmed = amount.trim();
  const limit = trimmed === "" ? null : Number(trimmed);
  if (limit !== null && (!Number.isFinite(limit) || limit < 0)) {
    throw new Error("Enter the spend limit in USD, e.g. 5 or 0.50, or leave it empty for none.");
  }
  return {
    limit_usd: limit,
    limit_reset: reset === "daily" || reset === "weekly" || reset === "monthly" ? reset : null,
  };
}
