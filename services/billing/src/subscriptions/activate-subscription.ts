import { AppError } from "@mkt/runtime/errors";
import { splitRevenue } from "@mkt/runtime/money";
import type { BillingContext } from "../context.ts";
import { formatUsd, ledgerAccounts, lockWallet, openWallet, postEntry } from "../wallets/ledger.ts";
import { addCalendarMonth } from "./calendar-month.ts";
import { monthlyCharge, type Plan } from "./plan.ts";
import { Subscription, type SubscriptionRow } from "./subscription.entity.ts";

/** The journal reference of a subscription's fee for one period (period 1 is the first). */
export function feeReference(subscriptionId: string, periodIndex: number): string {
  return `${subscriptionId}:${periodIndex}`;
}

/**
 * The saga's last step, one transaction: charge the first month (subscription kinds), post the
 * hoster's share, snapshot the plan's terms and activate. The subscription row is locked first,
 * so concurrent attempts at the same row (a retry racing the original) activate it once; a row
 * that is no longer pending is returned as it is, with nothing done (`activated` false).
 */
export async function activateSubscription(
  ctx: BillingContext,
  subscriptionId: string,
  plan: Plan,
): Promise<{ row: SubscriptionRow; activated: boolean }> {
  return ctx.orm.em.fork().transactional(async (em) => {
    const [locked] = await em.execute(`select * from subscriptions where id = ? for update`, [subscriptionId]);
    const row = em.map(Subscription, locked!);
    if (row.status !== "pending") return { row, activated: false };

    const price = monthlyCharge(plan.terms);
    if (price > 0n) {
      await openWallet(em, row.accountId, ctx.config.STARTING_CREDIT_USD);
      const wallet = await lockWallet(em, row.accountId);
      const available = wallet.posted - wallet.held;
      if (price > available) {
        throw new AppError(
          "insufficient_credits",
          `Insufficient credits: your balance is ${formatUsd(available)} and this plan costs ${formatUsd(price)} per month.`,
        );
      }
      // Every paid plan is a hoster's: 80% to the hoster, floor(20%) to the platform (DESIGN.md §3).
      const { platformFee, hosterEarned } = splitRevenue(price, true);
      const posted = await postEntry(em, "subscription_fee", feeReference(row.id, 1), [
        [ledgerAccounts.customer(row.accountId), -price],
        [ledgerAccounts.revenue, platformFee],
        [ledgerAccounts.hoster(plan.hosterId), hosterEarned],
      ]);
      if (!posted) throw new Error(`the first fee of pending subscription ${row.id} is already posted`);
      await em.execute(`update wallets set posted_micros = posted_micros - ? where account_id = ?`, [
        price,
        row.accountId,
      ]);
    }

    const start = ctx.clock();
    const t = plan.terms;
    const [activated] = await em.execute(
      `update subscriptions set status = 'active', hoster_id = ?, product_name = ?, hoster_name = ?,
         pricing_model = ?, monthly_price_micros = ?, included_tokens = ?, input_price_per_1m_micros = ?,
         output_price_per_1m_micros = ?, overage_price_per_1m_micros = ?, rpm_limit = ?, tpm_limit = ?,
         max_concurrent = ?, max_output_tokens = ?, max_context_tokens = ?,
         period_index = 1, period_start = ?, period_end = ?, activated_at = ?
       where id = ? returning *`,
      [
        plan.hosterId,
        t.name,
        plan.hosterName,
        t.pricingModel,
        t.monthlyPriceMicros,
        t.includedTokens,
        t.inputPricePer1mMicros,
        t.outputPricePer1mMicros,
        t.overagePricePer1mMicros,
        t.rpmLimit,
        t.tpmLimit,
        t.maxConcurrent,
        t.maxOutputTokens,
        t.maxContextTokens,
        start,
        addCalendarMonth(start),
        start,
        row.id,
      ],
    );
    return { row: em.map(Subscription, activated!), activated: true };
  });
}
