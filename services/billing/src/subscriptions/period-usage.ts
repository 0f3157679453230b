import { sqlArray, type Cte } from "../batch-statement.ts";

/** One subscription request being settled: the period it counts in and the tokens it used. */
export interface PeriodUse {
  subscriptionId: string;
  /** The period its budget's terms snapshot belongs to. */
  periodIndex: number;
  /** Its input + output tokens. */
  tokens: bigint;
  /** The overage tokens it was charged for (a `subscription_overage` request's; else 0). */
  overageTokens: bigint;
}

/**
 * Inside the settle transaction, as a CTE of its statement (batch-statement.ts): adds each
 * subscription request's tokens to its period's use (`subscription_usage`, keyed on the period
 * index of the terms it was admitted under), and the overage tokens it was charged for (priced by
 * the split decided at admission, not here). Given only requests being settled now, so the
 * request_id dedupe keeps it exactly-once. Its rows are written in key order, like every other
 * lock of settlement, so concurrent settlers cannot deadlock.
 */
export function periodUsageCte(uses: readonly PeriodUse[]): Cte {
  const periods = new Map<string, PeriodUse>();
  for (const u of uses) {
    const key = `${u.subscriptionId}/${u.periodIndex}`;
    const period = periods.get(key);
    if (period) {
      period.tokens += u.tokens;
      period.overageTokens += u.overageTokens;
    } else periods.set(key, { ...u });
  }
  const rows = [...periods].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, period]) => period);
  return {
    name: "period_use",
    sql: `insert into subscription_usage (subscription_id, period_index, used_tokens, overage_tokens)
      select * from unnest(?::uuid[], ?::integer[], ?::bigint[], ?::bigint[])
      on conflict (subscription_id, period_index) do update
        set used_tokens = subscription_usage.used_tokens + excluded.used_tokens,
            overage_tokens = subscription_usage.overage_tokens + excluded.overage_tokens`,
    params: [
      sqlArray(rows.map((p) => p.subscriptionId)),
      sqlArray(rows.map((p) => p.periodIndex)),
      sqlArray(rows.map((p) => p.tokens)),
      sqlArray(rows.map((p) => p.overageTokens)),
    ],
  };
}
