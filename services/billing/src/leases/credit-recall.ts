import { performance } from "node:perf_hooks";
import { fenceWaitMs } from "@mkt/runtime/fence-wait";
import { billingDb } from "../billing-db.ts";
import { int8, type BillingContext } from "../context.ts";
import { fenceLeases } from "./fence-leases.ts";
import { unspent } from "./lease-growth.ts";
import { loadLeases } from "./lease-store.ts";

/**
 * Takes back the credit an account's leases hold unspent, for a payment that what is not held
 * cannot cover: a customer who chatted a moment ago has credit lent to edges that no request is
 * using, and a purchase must not be refused for it. Only when that unspent credit, with what is
 * free, covers `amount` are the account's leases fenced and recalled (waiting for the edges'
 * final reports at most one TTL and a margin, as any fence does): their settlement releases what
 * was not used, and the caller tries once more. A customer who cannot pay keeps its leases.
 * Returns whether anything was recalled.
 */
export async function recallLentCredit(ctx: BillingContext, accountId: string, amount: bigint): Promise<boolean> {
  const holders = await ctx.orm.em.fork().transactional(async (em) => {
    // No wallet yet (the refused payment opened it in the transaction that rolled back): no leases.
    const db = await billingDb(em);
    const row = await db
      .selectFrom("wallets as w")
      .select(["w.posted_micros", "w.held_micros"])
      .where("w.account_id", "=", accountId)
      .forUpdate()
      .executeTakeFirst();
    if (!row) return [];
    const free = int8(row.posted_micros) - int8(row.held_micros);
    const leases = await loadLeases(em, (l) => l.and([l("l.account_id", "=", accountId), l("l.status", "=", "open")]));
    const lent = leases.reduce((sum, l) => sum + unspent(l.allowances.find((a) => a.resource === "credit")), 0n);
    if (lent <= 0n || free + lent < amount) return [];
    return fenceLeases(em, accountId);
  });
  if (holders.length === 0) return false;
  await ctx.recallLeases(holders, "", performance.now() + fenceWaitMs(ctx.config.LEASE_TTL_MS));
  return true;
}
