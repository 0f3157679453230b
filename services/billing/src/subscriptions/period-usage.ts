import type { Micros } from "@mkt/runtime/money";
import { int8, type Em } from "../context.ts";
import { overageCharge } from "./plan-pricing.ts";

/** One request being settled: its reservation row, the tokens it used, and its cost so far. */
export interface PeriodCharge {
  reservation: Record<string, unknown>;
  inputTokens: bigint;
  outputTokens: bigint;
  /** Priced from the reservation's per-1M prices; replaced here for overage plans. */
  cost: Micros;
}

const placeholders = (count: number, row: string) => Array.from({ length: count }, () => row).join(", ");

/**
 * Inside the settle transaction: adds each subscription request's tokens to its period's use
 * (`subscription_usage`, keyed on the period index its reservation snapshotted) and prices the
 * overage of `subscription_overage` requests (see overageCharge), in the order given. Runs only for
 * requests being settled now, so the request_id dedupe keeps it exactly-once. Two statements for
 * any number of requests; none when there is no subscription request. The usage rows are locked
 * in key order, like every other lock of settlement, so concurrent settlers cannot deadlock.
 */
export async function countPeriodUsage(em: Em, charges: readonly PeriodCharge[]): Promise<void> {
  const planned = charges.filter((c) => c.reservation.subscription_id);
  if (planned.length === 0) return;
  const keyOf = (c: PeriodCharge) => `${c.reservation.subscription_id as string}/${Number(c.reservation.period_index)}`;
  const keys = [
    ...new Map<string, [string, number]>(
      planned.map((c) => [keyOf(c), [c.reservation.subscription_id as string, Number(c.reservation.period_index)]]),
    ),
  ].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));

  // Upsert-and-lock: a new period starts at zero, an existing one is locked and read.
  const rows = await em.execute(
    `insert into subscription_usage (subscription_id, period_index)
     values ${placeholders(keys.length, "(?::uuid, ?::integer)")}
     on conflict (subscription_id, period_index) do update set used_tokens = subscription_usage.used_tokens
     returning subscription_id, period_index, used_tokens, overage_tokens`,
    keys.flatMap(([, key]) => key),
  );
  const state = new Map(
    rows.map((r) => [
      `${r.subscription_id as string}/${Number(r.period_index)}`,
      { used: int8(r.used_tokens), overage: int8(r.overage_tokens) },
    ]),
  );

  for (const c of planned) {
    const period = state.get(keyOf(c))!;
    const tokens = c.inputTokens + c.outputTokens;
    const r = c.reservation;
    if (r.pricing_model === "subscription_overage") {
      const charge = overageCharge({
        includedTokens: int8(r.included_tokens),
        usedBefore: period.used,
        overageBefore: period.overage,
        tokens,
        overagePricePer1m: int8(r.overage_price_per_1m_micros),
        reserved: int8(r.reserved_micros),
      });
      c.cost = charge.cost;
      period.overage += charge.overageTokens;
    }
    period.used += tokens;
  }

  await em.execute(
    `update subscription_usage u set used_tokens = v.used, overage_tokens = v.overage
     from (values ${placeholders(keys.length, "(?::uuid, ?::integer, ?::bigint, ?::bigint)")})
       as v (subscription_id, period_index, used, overage)
     where u.subscription_id = v.subscription_id and u.period_index = v.period_index`,
    keys.flatMap(([key, [subscriptionId, periodIndex]]) => {
      const period = state.get(key)!;
      return [subscriptionId, periodIndex, period.used, period.overage];
    }),
  );
}
