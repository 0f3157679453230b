import { IsolationLevel } from "@mikro-orm/core";
import type { HosterSubscriber, ListHosterSubscribersResponse } from "@mkt/proto/billing/v1/billing";
import { int8, type BillingContext, type Em } from "../context.ts";
import { Subscription, type SubscriptionRow } from "../subscriptions/subscription.entity.ts";
import { maskEmail } from "./masked-email.ts";
import { hosterProducts, planFigures, requireHoster, SUBSCRIBER_STATUSES_SQL } from "./hoster-plans.ts";

/** The most subscribers one list shows (newest first); accounts answers that many e-mails at once. */
export const MAX_LISTED_SUBSCRIBERS = 1000;

/**
 * GET /v1/hoster/subscribers: every plan of the hoster with its live subscriber count and what it
 * has earned the hoster (all time), and the subscribers themselves, newest first, with status,
 * lifetime usage and a masked e-mail. E-mails come from accounts in one batch and are masked here:
 * a full address never leaves billing.
 */
export async function listHosterSubscribers(
  ctx: BillingContext,
  hosterIdInput: string,
): Promise<ListHosterSubscribersResponse> {
  const hosterId = requireHoster(hosterIdInput);
  const products = await hosterProducts(ctx, hosterId);
  const { plans, rows, usage } = await ctx.orm.em.fork().transactional(
    async (em) => {
      const plans = await planFigures(em, hosterId, products);
      const raw = await em.execute(
        `select * from subscriptions where hoster_id = ? and status in (${SUBSCRIBER_STATUSES_SQL}, 'cancelled')
         order by created_at desc, id limit ${MAX_LISTED_SUBSCRIBERS}`,
        [hosterId],
      );
      const rows = raw.map((r) => em.map(Subscription, r));
      return { plans, rows, usage: await keyUsage(em, hosterId, rows) };
    },
    { isolationLevel: IsolationLevel.REPEATABLE_READ, readOnly: true },
  );
  return {
    plans: plans.map((p) => ({
      productId: p.productId,
      productName: p.productName,
      subscribers: p.subscribers,
      earnedMicros: p.feesMicros + p.usageMicros,
    })),
    subscribers: await renderSubscribers(ctx, rows, usage),
  };
}

/** One subscriber as its hoster sees it (the pause and resume answers). */
export async function hosterSubscriber(ctx: BillingContext, em: Em, row: SubscriptionRow): Promise<HosterSubscriber> {
  const [subscriber] = await renderSubscribers(ctx, [row], await keyUsage(em, row.hosterId ?? "", [row]));
  return subscriber!;
}

interface KeyUsage {
  requests: bigint;
  tokens: bigint;
}

/** Lifetime requests and tokens of each subscription's scoped key, from the hoster rollup. */
async function keyUsage(em: Em, hosterId: string, rows: SubscriptionRow[]): Promise<Map<string, KeyUsage>> {
  const keys = rows.map((row) => row.keyId).filter((key): key is string => !!key);
  if (keys.length === 0) return new Map();
  const found = await em.execute(
    `select key_id, sum(requests) as requests, sum(input_tokens + output_tokens) as tokens
     from hoster_usage_daily where hoster_id = ? and key_id in (${keys.map(() => "?").join(", ")}) group by key_id`,
    [hosterId, ...keys],
  );
  return new Map(found.map((r) => [r.key_id as string, { requests: int8(r.requests), tokens: int8(r.tokens) }]));
}

async function renderSubscribers(
  ctx: BillingContext,
  rows: SubscriptionRow[],
  usage: Map<string, KeyUsage>,
): Promise<HosterSubscriber[]> {
  const accountIds = [...new Set(rows.map((row) => row.accountId))];
  const { accounts } =
    accountIds.length > 0 ? await ctx.accounts.getAccounts({ accountIds }, { timeoutMs: 10_000 }) : { accounts: [] };
  const masked = new Map(accounts.map((a) => [a.accountId, maskEmail(a.email)]));
  return rows.map((row) => {
    const used = (row.keyId && usage.get(row.keyId)) || { requests: 0n, tokens: 0n };
    return {
      subscriptionId: row.id,
      productId: row.productId,
      productName: row.productName ?? "",
      status: row.status,
      emailMasked: masked.get(row.accountId) ?? "",
      periodEnd: row.periodEnd?.toISOString() ?? "",
      requests: used.requests,
      totalTokens: used.tokens,
      createdAt: row.createdAt.toISOString(),
    };
  });
}
