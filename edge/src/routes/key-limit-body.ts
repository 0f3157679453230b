import { microsToUsd, usdToMicros } from "@mkt/runtime/money";
import type { KeyLimit } from "@mkt/proto/billing/v1/billing";
import { nullableNumber, nullableString, usd } from "./response-schemas.ts";

/** What POST and PATCH /v1/keys take of a key's spend limit (docs/adr/0020-key-spend-limits-in-billing.md). */
export interface KeyLimitBody {
  /** USD; null: no limit. */
  limit_usd?: number | null;
  /** UTC windows (weeks start on Monday); null: never resets. */
  limit_reset?: "daily" | "weekly" | "monthly" | null;
}

export const keyLimitProperties = {
  limit_usd: {
    type: ["number", "null"],
    minimum: 0,
    maximum: 1_000_000,
    example: 5,
    description: "Spend limit in USD (null: none). Enforced on every edge at the request's worst case.",
  },
  limit_reset: {
    type: ["string", "null"],
    enum: ["daily", "weekly", "monthly", null],
    example: "monthly",
    description: "When the limit starts afresh (UTC day, week from Monday, calendar month); null: never.",
  },
} as const;

/** The limit as billing takes it: micro-USD (undefined: none) and its reset ('' never). */
export function limitOf(body: KeyLimitBody, current?: KeyLimit) {
  const usd = body.limit_usd === undefined ? undefined : body.limit_usd;
  const limitMicros = usd === undefined ? current?.limitMicros : usd === null ? undefined : usdToMicros(usd.toFixed(6));
  const limitReset = body.limit_reset === undefined ? (current?.limitReset ?? "") : (body.limit_reset ?? "");
  return { limitMicros, limitReset };
}

/** The fields renderKeyLimit adds to a key. */
export const keyLimitResponseProperties = {
  limit_usd: nullableNumber("The spend limit; null when the key has none"),
  limit_reset: nullableString("`daily`, `weekly`, `monthly` or null (never resets)"),
  spend_usd: usd("Spent in the current window"),
  limit_remaining_usd: nullableNumber(),
  limit_resets_at: nullableString(),
};

/** A key's limit fields in GET/POST/PATCH /v1/keys: the limit, its reset, the window's spend and what remains. */
export function renderKeyLimit(limit: KeyLimit | undefined) {
  const spent = limit?.spentMicros ?? 0n;
  const cap = limit?.limitMicros;
  return {
    limit_usd: cap === undefined ? null : microsToUsd(cap),
    limit_reset: limit?.limitReset || null,
    spend_usd: microsToUsd(spent),
    limit_remaining_usd: cap === undefined ? null : microsToUsd(cap > spent ? cap - spent : 0n),
    limit_resets_at: limit?.resetsAt || null,
  };
}
