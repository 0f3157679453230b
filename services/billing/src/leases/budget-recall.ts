import { performance } from "node:perf_hooks";
import type { GrantLeaseRequest } from "@mkt/proto/billing/v1/leases";
import { billingDb } from "../billing-db.ts";
import type { BillingContext } from "../context.ts";
import { withDeadlockRetry } from "./deadlock-retry.ts";
import type { FencedLease } from "./recall-types.ts";
import { GRANT_RECALL_WAIT_MS } from "./grant-recall.ts";
import { windowsOf } from "./lease-windows.ts";

/** The plan refusals that room lent to other edges' budgets can lift, and the room each needs. */
const LIFTABLE: Record<string, string[]> = {
  concurrency_limit_exceeded: ["slots"],
  rate_limit_exceeded: ["sub_requests_minute", "sub_tokens_minute"],
  included_tokens_exhausted: ["included_tokens"],
};

/**
 * GrantLease's bounded recall for a subscription's plan limits
 * (docs/leases.md#how-much-room-an-edge-gets): when a scoped key's request is refused for slots,
 * the plan's minute or included tokens while other edges' budgets for the subscription hold room
 * they have not used (slots lent beyond their requests in flight, plan requests or tokens of the
 * current minute, included tokens not admitted), those budgets are fenced (state still `active`:
 * the edges re-grant on their next request) and recalled, waiting at most 50 ms for the acks, which
 * give the unused room back (recall-ack.ts). Returns whether anything was recalled (the caller then
 * grants once more). Nothing is fenced when no other budget holds unused room of the kind refused:
 * a subscriber at its real limit gets its 429 at once.
 */
export async function recallBudgetsForGrant(ctx: BillingContext, req: GrantLeaseRequest, code: string) {
  const subscriptionId = req.request?.subscriptionId ?? "";
  const resources = LIFTABLE[code];
  if (!subscriptionId || !resources) return false;
  const holders = await withDeadlockRetry(() =>
    ctx.orm.em.fork().transactional(async (em): Promise<FencedLease[]> => {
      // The row lock cancel and pause take: a heartbeat growing these budgets (FOR SHARE) commits
      // wholly before the fence or reads them fenced after it.
      const db = await billingDb(em);
      const subscription = await db
        .selectFrom("subscriptions as s")
        .select("s.id")
        .where("s.id", "=", subscriptionId)
        .forUpdate()
        .executeTakeFirst();
      if (!subscription) return [];
      // Compared as the driver reads it (BillingDb): as text, in UTC.
      const minute = windowsOf({ lengthMs: 60_000 }, ctx.clock(), ctx.config.LEASE_TTL_MS).current.start.toISOString();
      const rows = await db
        .selectFrom("lease_budgets as b")
        .innerJoin("leases as l", "l.id", "b.lease_id")
        .innerJoin("lease_allowances as a", (join) =>
          join
            .onRef("a.lease_id", "=", "l.id")
            .on((eb) => eb("a.scope", "=", eb.cast<string>("b.subscription_id", "text"))),
        )
        .select(["l.id", "l.edge_id"])
        .distinct()
        .where("b.subscription_id", "=", subscriptionId)
        .where("b.status", "=", "open")
        .where("l.status", "=", "open")
        .where("l.edge_id", "<>", req.edgeId)
        .where((eb) => eb("a.resource", "=", eb.fn.any(eb.val(resources))))
        .whereRef("a.granted", ">", "a.admitted")
        .where((eb) => eb.or([eb("a.resource", "in", ["slots", "included_tokens"]), eb("a.window_start", "=", minute)]))
        .execute();
      if (rows.length === 0) return [];
      await db
        .updateTable("lease_budgets")
        .set({ status: "fenced", state: "active", fenced_at: ctx.clock() })
        .where("subscription_id", "=", subscriptionId)
        .where("status", "=", "open")
        .where((eb) => eb("lease_id", "=", eb.fn.any(eb.val(rows.map((r) => r.id)))))
        .execute();
      return rows.map((r) => ({ leaseId: r.id, edgeId: r.edge_id }));
    }),
  );
  if (holders.length === 0) return false;
  ctx.log.debug({ subscriptionId, holders: holders.length, code }, "recalling budget room for a grant");
  await ctx.recallLeases(holders, subscriptionId, performance.now() + GRANT_RECALL_WAIT_MS);
  return true;
}
