import type { BudgetTerms } from "@mkt/proto/billing/v1/leases";
import { billingDb } from "../billing-db.ts";
import type { Em } from "../context.ts";
import { write } from "../write-batch.ts";
import { planTerms } from "../subscriptions/plan-limits.ts";
import type { BudgetRow, LeaseRow } from "./lease-rows.ts";

/**
 * Locks the subscriptions (FOR SHARE, in id order) before any wallet: the order renewal,
 * cancel and pause take them in (subscription, then wallet). A cancel, pause or past due
 * updates the row, which conflicts with this lock, and fences the budgets in that transaction: a
 * grant or heartbeat therefore commits wholly before the fence (and the fence catches what it
 * granted) or reads the budget after it (fenced, never revived).
 */
export async function lockSubscriptions(
  em: Em,
  subscriptionIds: Iterable<string>,
): Promise<Map<string, Record<string, unknown>>> {
  const ids = [...new Set(subscriptionIds)].sort();
  if (ids.length === 0) return new Map();
  const db = await billingDb(em);
  const rows = await db
    .selectFrom("subscriptions as s")
    .selectAll("s")
    .where((eb) => eb("s.id", "=", eb.fn.any(eb.val(ids))))
    .orderBy("s.id")
    .forShare()
    .execute();
  return new Map(rows.map((row) => [row.id, row]));
}

/** Subscriptions with an open budget on the edge's open leases (a heartbeat locks them first). */
export async function budgetSubscriptions(em: Em, edgeId: string, accountIds?: string[]): Promise<string[]> {
  const db = await billingDb(em);
  let query = db
    .selectFrom("lease_budgets as b")
    .innerJoin("leases as l", "l.id", "b.lease_id")
    .select("b.subscription_id")
    .distinct()
    .where("l.edge_id", "=", edgeId)
    .where("l.status", "=", "open")
    .where("b.status", "=", "open");
  if (accountIds) query = query.where((eb) => eb("l.account_id", "=", eb.fn.any(eb.val(accountIds))));
  const rows = await query.execute();
  return rows.map((row) => row.subscription_id);
}

/**
 * Opens the lease's budget for an active subscription, or reopens a fenced one (GrantLease only:
 * the subscription was checked active under its lock), refreshing the terms snapshot its
 * requests settle on. Cumulative totals carry on in the same allowances. Written through `write`,
 * not Kysely: GrantLease holds it back with the grant's other writes (batchWrites), which takes a
 * statement's text.
 */
export async function openBudget(em: Em, lease: LeaseRow, subscription: Record<string, unknown>): Promise<BudgetRow> {
  const plan = planTerms(subscription);
  await write(
    em,
    `insert into lease_budgets (lease_id, subscription_id, status, state, hoster_id, period_index, pricing_model,
       included_tokens, input_price_per_1m_micros, output_price_per_1m_micros, overage_price_per_1m_micros,
       max_context_tokens, max_output_tokens, rpm_limit, product_id, cached_input_price_per_1m_micros)
     values (?, ?, 'open', 'active', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
     on conflict (lease_id, subscription_id) do update set status = 'open', state = 'active', fenced_at = null,
       hoster_id = excluded.hoster_id, period_index = excluded.period_index, pricing_model = excluded.pricing_model,
       included_tokens = excluded.included_tokens, input_price_per_1m_micros = excluded.input_price_per_1m_micros,
       output_price_per_1m_micros = excluded.output_price_per_1m_micros,
       overage_price_per_1m_micros = excluded.overage_price_per_1m_micros,
       max_context_tokens = excluded.max_context_tokens, max_output_tokens = excluded.max_output_tokens,
       rpm_limit = excluded.rpm_limit, product_id = excluded.product_id,
       cached_input_price_per_1m_micros = excluded.cached_input_price_per_1m_micros`,
    [
      lease.id,
      plan.subscriptionId,
      plan.hosterId || null,
      plan.periodIndex,
      plan.pricingModel,
      plan.includedTokens,
      plan.inputPricePer1m,
      plan.outputPricePer1m,
      plan.overagePricePer1m,
      plan.maxContextTokens,
      plan.maxOutputTokens,
      plan.rpmLimit,
      plan.productId || null,
      plan.cachedInputPricePer1m ?? null,
    ],
  );
  const terms: BudgetTerms = {
    hosterId: plan.hosterId,
    pricingModel: plan.pricingModel,
    inputPricePer1mMicros: plan.inputPricePer1m,
    outputPricePer1mMicros: plan.outputPricePer1m,
    overagePricePer1mMicros: plan.overagePricePer1m,
    cachedInputPricePer1mMicros: plan.cachedInputPricePer1m,
    maxContextTokens: plan.maxContextTokens,
    maxOutputTokens: plan.maxOutputTokens,
    rpmLimit: plan.rpmLimit,
    productId: plan.productId,
  };
  const fields = { status: "open" as const, state: "active", periodIndex: plan.periodIndex, terms };
  let budget = lease.budgets.find((b) => b.subscriptionId === plan.subscriptionId);
  if (!budget) {
    budget = { subscriptionId: plan.subscriptionId, ...fields };
    lease.budgets.push(budget);
  }
  Object.assign(budget, fields);
  return budget;
}

/**
 * Fences one budget found open while its subscription is no longer active (a path that did not).
 * Written through `write`, as openBudget is: held back with the heartbeat's other writes.
 */
export async function fenceBudget(em: Em, lease: LeaseRow, budget: BudgetRow, state: string, now: Date) {
  budget.status = "fenced";
  budget.state = state;
  await write(
    em,
    `update lease_budgets set status = 'fenced', state = ?, fenced_at = ? where lease_id = ? and subscription_id = ?`,
    [state, now, lease.id, budget.subscriptionId],
  );
}
