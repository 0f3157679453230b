import { AppError } from "@mkt/runtime/errors";
import { splitRevenue } from "@mkt/runtime/money";
import type { BillingContext, Em } from "../context.ts";
import { recallLentCredit } from "../leases/credit-recall.ts";
import { formatUsd, ledgerAccounts, lockWallet, openWallet, postEntry } from "../wallets/ledger.ts";
import { addCalendarMonth } from "./calendar-month.ts";
import { monthlyCharge, type Plan } from "./plan.ts";
import { Subscription, type SubscriptionRow } from "./subscription.entity.ts";
import { SNAPSHOT_SET, snapshotParams } from "./terms-snapshot.ts";

/**
 * The journal reference of a subscription's fee for one period (period 1 is the first). Unique
 * with the kind, it makes each period's charge exactly-once; earnings reports read the
 * subscription back from it (the part before the colon).
 */
export function feeReference(subscriptionId: string, periodIndex: number): string {
  return `${subscriptionId}:${periodIndex}`;
}

/**
 * Charges one period's fee, already checked against the spendable balance: one
 * `subscription_fee` entry (customer −price, platform floor(20%), hoster the rest:
 * docs/adr/0004-platform-keeps-20-percent.md), dated `at`, and the wallet's posted balance. The
 * entry is unique per (subscription, period), so finding it already posted means the period was
 * charged: that is a bug in the caller's locking.
 */
export async function postFee(
  em: Em,
  fee: { subscriptionId: string; periodIndex: number; accountId: string; hosterId: string },
  price: bigint,
  at: Date,
): Promise<void> {
  // Every paid plan is a hoster's: 80% to the hoster, floor(20%) to the platform.
  const { platformFee, hosterEarned } = splitRevenue(price, true);
  const reference = feeReference(fee.subscriptionId, fee.periodIndex);
  const posted = await postEntry(
    em,
    "subscription_fee",
    reference,
    [
      [ledgerAccounts.customer(fee.accountId), -price],
      [ledgerAccounts.revenue, platformFee],
      [ledgerAccounts.hoster(fee.hosterId), hosterEarned],
    ],
    at,
  );
  if (!posted) throw new Error(`subscription fee ${reference} is already posted`);
  await em.execute(`update wallets set posted_micros = posted_micros - ? where account_id = ?`, [price, fee.accountId]);
}

/** The first month's price is more than the account's credit that is not held. */
class ShortOfCredit extends AppError {
  readonly accountId: string;
  readonly price: bigint;

  constructor(accountId: string, price: bigint, available: bigint) {
    super(
      "insufficient_credits",
      `Insufficient credits: your balance is ${formatUsd(available)} and this plan costs ${formatUsd(price)} per month.`,
    );
    this.accountId = accountId;
    this.price = price;
  }
}

/**
 * The saga's last step, one transaction: charge the first month (subscription kinds), post the
 * hoster's share, snapshot the plan's terms and activate. The subscription row is locked first,
 * so concurrent attempts at the same row (a retry racing the original) activate it once; a row
 * that is no longer pending is returned as it is, with nothing done (`activated` false). When
 * only credit lent to the account's leases stands in the way, it is recalled and the step runs
 * once more.
 */
export async function activateSubscription(
  ctx: BillingContext,
  subscriptionId: string,
  plan: Plan,
  keyId: string,
): Promise<{ row: SubscriptionRow; activated: boolean }> {
  try {
    return await activateOnce(ctx, subscriptionId, plan, keyId);
  } catch (err) {
    if (!(err instanceof ShortOfCredit) || !(await recallLentCredit(ctx, err.accountId, err.price))) throw err;
    return activateOnce(ctx, subscriptionId, plan, keyId);
  }
}

async function activateOnce(
  ctx: BillingContext,
  subscriptionId: string,
  plan: Plan,
  keyId: string,
): Promise<{ row: SubscriptionRow; activated: boolean }> {
  return ctx.orm.em.fork().transactional(async (em) => {
    const [locked] = await em.execute(`select * from subscriptions where id = ? for update`, [subscriptionId]);
    const row = em.map(Subscription, locked!);
    if (row.status !== "pending") return { row, activated: false };

    // The first period's anchor: renewals count whole months from it (calendar-month.ts).
    const start = ctx.clock();

    const price = monthlyCharge(plan.terms);
    if (price > 0n) {
      await openWallet(em, row.accountId, ctx.config.STARTING_CREDIT_USD);
      const wallet = await lockWallet(em, row.accountId);
      const available = wallet.posted - wallet.held;
      if (price > available) throw new ShortOfCredit(row.accountId, price, available);
      await postFee(
        em,
        { subscriptionId: row.id, periodIndex: 1, accountId: row.accountId, hosterId: plan.hosterId },
        price,
        start,
      );
    }

    const [activated] = await em.execute(
      `update subscriptions set status = 'active', ${SNAPSHOT_SET}, key_id = ?,
         period_index = 1, period_start = ?, period_end = ?, activated_at = ?
       where id = ? returning *`,
      [...snapshotParams(plan), keyId, start, addCalendarMonth(start), start, row.id],
    );
    return { row: em.map(Subscription, activated!), activated: true };
  });
}
