import { isUuid } from "@mkt/runtime/ids";
import type { GetUsageSummaryResponse } from "@mkt/proto/billing/v1/billing";
import { IsolationLevel } from "@mikro-orm/core";
import { AppError } from "@mkt/runtime/errors";
import { int8, type BillingContext } from "../context.ts";
import { currentCounts, tierLimits } from "../rate-limits/rate-limiter.ts";
import { openWallet } from "../wallets/ledger.ts";
import { Wallet } from "../wallets/wallet.entity.ts";

export function requireAccount(accountId: string): void {
  if (!isUuid(accountId)) throw new AppError("invalid_request", "account_id must be a UUID", { param: "account_id" });
}

/** Spendable balance (posted − held), opening the wallet with its starting grant on first use. */
export async function spendableBalance(ctx: BillingContext, accountId: string): Promise<bigint> {
  requireAccount(accountId);
  const em = ctx.orm.em.fork();
  await em.transactional((tx) => openWallet(tx, accountId, ctx.config.STARTING_CREDIT_USD));
  const wallet = await em.findOneOrFail(Wallet, { accountId });
  return wallet.postedMicros - wallet.heldMicros;
}

const max0 = (n: bigint) => (n < 0n ? 0n : n);

/**
 * GET /v1/usage: balance, the current rate-limit windows, and 30 days of usage from the rollups.
 * Read in one repeatable-read snapshot: a settlement commits the charge and the usage row
 * together, so the balance and the totals shown must come from the same moment.
 */
export async function usageSummary(
  ctx: BillingContext,
  accountId: string,
  tier: string,
): Promise<GetUsageSummaryResponse> {
  requireAccount(accountId);
  await ctx.orm.em.fork().transactional((tx) => openWallet(tx, accountId, ctx.config.STARTING_CREDIT_USD));
  const now = ctx.clock();
  const limits = tierLimits(ctx.config.TIERS, tier);
  const since = new Date(now.getTime() - 30 * 86_400_000);
  const { balance, counts, totals } = await ctx.orm.em.fork().transactional(
    async (em) => {
      const wallet = await em.findOneOrFail(Wallet, { accountId });
      const counts = await currentCounts(em, accountId, now);
      const [totals] = await em.execute(
        `select coalesce(sum(requests), 0) as requests, coalesce(sum(input_tokens), 0) as input_tokens,
           coalesce(sum(output_tokens), 0) as output_tokens, coalesce(sum(cost_micros), 0) as cost_micros,
           coalesce(sum(latency_ms_sum), 0) as latency_ms_sum
         from usage_hourly where account_id = ? and hour >= date_trunc('hour', ?::timestamptz, 'UTC')`,
        [accountId, since],
      );
      return { balance: wallet.postedMicros - wallet.heldMicros, counts, totals };
    },
    { isolationLevel: IsolationLevel.REPEATABLE_READ, readOnly: true },
  );
  const requests = int8(totals?.requests);
  return {
    creditBalanceMicros: balance,
    rateLimits: {
      requestsThisMinute: counts.minute,
      requestsToday: counts.day,
      limitPerMinute: limits.limitPerMinute,
      limitPerDay: limits.limitPerDay,
      remainingThisMinute: max0(limits.limitPerMinute - counts.minute),
      remainingToday: max0(limits.limitPerDay - counts.day),
    },
    usage30d: {
      totalRequests: requests,
      totalInputTokens: int8(totals?.input_tokens),
      totalOutputTokens: int8(totals?.output_tokens),
      totalCostMicros: int8(totals?.cost_micros),
      // Every request counts, failed ones included (DESIGN.md §4).
      avgLatencyMs: requests > 0n ? Number(int8(totals?.latency_ms_sum)) / Number(requests) : 0,
    },
  };
}
