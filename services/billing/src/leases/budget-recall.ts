import { performance } from "node:perf_hooks";
import type { GrantLeaseRequest } from "@mkt/proto/billing/v1/leases";
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
      const [subscription] = await em.execute(`select id from subscriptions where id = ? for update`, [subscriptionId]);
      if (!subscription) return [];
      const minute = windowsOf({ lengthMs: 60_000 }, ctx.clock(), ctx.config.LEASE_TTL_MS).current.start;
      const rows = await em.execute(
        `select distinct l.id, l.edge_id
         from lease_budgets b join leases l on l.id = b.lease_id
           join lease_allowances a on a.lease_id = l.id and a.scope = b.subscription_id::text
         where b.subscription_id = ? and b.status = 'open' and l.status = 'open' and l.edge_id <> ?
           and a.resource in (${resources.map(() => "?").join(", ")}) and a.granted > a.admitted
           and (a.resource in ('slots', 'included_tokens') or a.window_start = ?)`,
        [subscriptionId, req.edgeId, ...resources, minute],
      );
      if (rows.length === 0) return [];
      const ids = rows.map((r) => r.id as string);
      await em.execute(
        `update lease_budgets set status = 'fenced', state = 'active', fenced_at = ?
         where subscription_id = ? and status = 'open' and lease_id in (${ids.map(() => "?").join(", ")})`,
        [ctx.clock(), subscriptionId, ...ids],
      );
      return rows.map((r) => ({ leaseId: r.id as string, edgeId: r.edge_id as string }));
    }),
  );
  if (holders.length === 0) return false;
  ctx.log.debug({ subscriptionId, holders: holders.length, code }, "recalling budget room for a grant");
  await ctx.recallLeases(holders, subscriptionId, performance.now() + GRANT_RECALL_WAIT_MS);
  return true;
}
