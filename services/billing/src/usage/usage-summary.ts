import { max0 } from "@mkt/runtime/bigint-math";
import { isUuid } from "@mkt/runtime/ids";
import type { GetUsageSummaryRequest, GetUsageSummaryResponse } from "@mkt/proto/billing/v1/billing";
import { IsolationLevel } from "@mikro-orm/core";
import { AppError } from "@mkt/runtime/errors";
import { sql, type ExpressionBuilder } from "kysely";
import { billingDb, type BillingDb } from "../billing-db.ts";
import { int8, type BillingContext, type Em } from "../context.ts";
import { currentCounts, currentWindows, tierLimits } from "../rate-limits/rate-limiter.ts";
import { planTerms } from "../subscriptions/plan-limits.ts";
import { unspentPlanRequests, unspentRoom } from "../leases/unspent-room.ts";
import { openWallet } from "../wallets/ledger.ts";
import { Wallet } from "../wallets/wallet.entity.ts";
import { ownerWhere, usageOwner, type UsageOwner } from "./usage-owner.ts";

export function requireAccount(accountId: string): void {
  if (!isUuid(accountId)) throw new AppError("invalid_request", "account_id must be a UUID", { param: "account_id" });
}

/**
 * Spendable balance (posted − held, the leases' unspent room not counted as held: unspent-room.ts),
 * opening the wallet with its starting grant on first use.
 */
export async function spendableBalance(ctx: BillingContext, accountId: string): Promise<bigint> {
  requireAccount(accountId);
  await ctx.orm.em.fork().transactional((tx) => openWallet(tx, accountId, ctx.config.STARTING_CREDIT_USD));
  return ctx.orm.em.fork().transactional(
    async (em) => {
      const wallet = await em.findOneOrFail(Wallet, { accountId });
      const unspent = await unspentRoom(em, accountId, ctx.clock());
      return wallet.postedMicros - wallet.heldMicros + unspent.credit;
    },
    { isolationLevel: IsolationLevel.REPEATABLE_READ, readOnly: true },
  );
}

/**
 * The minute's requests and limit a report shows: the account tier's, or for a scoped key its
 * plan's per-subscriber rpm and the subscription's own count (the plan has no daily limit: the
 * day's figures stay the account's, whose limit the subscription's requests count against too).
 */
async function minuteFigures(
  em: Em,
  owner: UsageOwner,
  tierMinute: { count: bigint; limit: bigint },
  minuteStart: Date,
): Promise<{ count: bigint; limit: bigint }> {
  if (owner.subscriptionId === "") return tierMinute;
  const db = await billingDb(em);
  const row = await db
    .selectFrom("subscriptions as s")
    // The window compared as the driver reads it (BillingDb): as ISO text.
    .leftJoin("subscription_rate_counters as c", (join) =>
      join.onRef("c.subscription_id", "=", "s.id").on("c.window_start", "=", minuteStart.toISOString()),
    )
    .selectAll("s")
    .select((eb) => eb.fn.coalesce("c.requests", eb.lit(0)).as("minute_requests"))
    .where("s.id", "=", owner.subscriptionId)
    .where("s.account_id", "=", owner.accountId)
    .executeTakeFirst();
  if (!row) throw new AppError("not_found", "No such subscription.", { param: "subscription_id" });
  const unspent = await unspentPlanRequests(em, owner.subscriptionId, minuteStart);
  return { count: max0(int8(row.minute_requests) - unspent), limit: planTerms(row).rpmLimit };
}

/** The rollup columns the report sums. */
type SumColumn =
  "requests" | "input_tokens" | "output_tokens" | "cost_micros" | "latency_ms_sum" | "cached_input_tokens";

/**
 * The owner's sums over the hourly rollups from the hour that holds `since` on (UTC hours): every
 * sum zero when there is none.
 */
async function sumsSince(em: Em, owner: UsageOwner, since: Date) {
  const db = await billingDb(em);
  const sum0 = (eb: ExpressionBuilder<BillingDb, "usage_hourly">, column: SumColumn) =>
    eb.fn.coalesce(eb.fn.sum<string>(column), eb.lit(0));
  return (
    db
      .selectFrom("usage_hourly")
      .select((eb) => [
        sum0(eb, "requests").as("requests"),
        sum0(eb, "input_tokens").as("input_tokens"),
        sum0(eb, "output_tokens").as("output_tokens"),
        sum0(eb, "cost_micros").as("cost_micros"),
        sum0(eb, "latency_ms_sum").as("latency_ms_sum"),
        sum0(eb, "cached_input_tokens").as("cached_input_tokens"),
      ])
      .where(ownerWhere(owner))
      // The time bound as the driver reads times (BillingDb): as ISO text.
      .where("hour", ">=", sql<string>`date_trunc('hour', ${since.toISOString()}::timestamptz, 'UTC')`)
      .executeTakeFirst()
  );
}

/**
 * GET /v1/usage: balance, the current rate-limit windows, and 30 days of usage from the rollups.
 * Read in one repeatable-read snapshot, so the balance, the counters and the totals shown come from
 * one moment; the totals read the hourly rollup, which trails settlement by up to one fold
 * (docs/settlement.md#rollups-folded-off-the-settlement-transaction), so for that long the balance
 * may show a charge the totals do not yet count. A scoped key's
 * owner is its subscription: usage and the minute's limit are the subscription's; the balance
 * and tier stay the account's (the subscriber must know whether it can pay).
 */
export async function usageSummary(
  ctx: BillingContext,
  request: GetUsageSummaryRequest,
): Promise<GetUsageSummaryResponse> {
  const owner = usageOwner(request);
  const { accountId } = owner;
  await ctx.orm.em.fork().transactional((tx) => openWallet(tx, accountId, ctx.config.STARTING_CREDIT_USD));
  const now = ctx.clock();
  const limits = tierLimits(ctx.config.TIERS, request.tier);
  const since = new Date(now.getTime() - 30 * 86_400_000);
  const { balance, counts, minute, totals } = await ctx.orm.em.fork().transactional(
    async (em) => {
      const wallet = await em.findOneOrFail(Wallet, { accountId });
      const counted = await currentCounts(em, accountId, now);
      const unspent = await unspentRoom(em, accountId, now);
      const counts = { minute: max0(counted.minute - unspent.minute), day: max0(counted.day - unspent.day) };
      const minute = await minuteFigures(
        em,
        owner,
        { count: counts.minute, limit: limits.limitPerMinute },
        currentWindows(now).minuteStart,
      );
      const totals = await sumsSince(em, owner, since);
      return { balance: wallet.postedMicros - wallet.heldMicros + unspent.credit, counts, minute, totals };
    },
    { isolationLevel: IsolationLevel.REPEATABLE_READ, readOnly: true },
  );
  const requests = int8(totals?.requests);
  return {
    creditBalanceMicros: balance,
    rateLimits: {
      requestsThisMinute: minute.count,
      requestsToday: counts.day,
      limitPerMinute: minute.limit,
      limitPerDay: limits.limitPerDay,
      remainingThisMinute: max0(minute.limit - minute.count),
      remainingToday: max0(limits.limitPerDay - counts.day),
    },
    usage30d: {
      totalRequests: requests,
      totalInputTokens: int8(totals?.input_tokens),
      totalCachedInputTokens: int8(totals?.cached_input_tokens),
      totalOutputTokens: int8(totals?.output_tokens),
      totalCostMicros: int8(totals?.cost_micros),
      // Every request counts, failed ones included.
      avgLatencyMs: requests > 0n ? Number(int8(totals?.latency_ms_sum)) / Number(requests) : 0,
    },
  };
}
