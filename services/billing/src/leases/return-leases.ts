import { isUuid } from "@mkt/runtime/ids";
import type { ReturnLeasesRequest, ReturnLeasesResponse } from "@mkt/proto/billing/v1/leases";
import type { BillingContext } from "../context.ts";
import { withDeadlockRetry } from "./deadlock-retry.ts";
import { leaseState, unknownLease } from "./lease-state.ts";
import { applyReport, closeReported, loadLeases, lockWallets } from "./lease-store.ts";
import { validateEdgeCall, validateReports } from "./lease-validation.ts";
import { holdIncarnation, incarnationOf } from "./edge-incarnation.ts";

/**
 * The edge gives leases back (idle, or shutting down): each report is final, so each lease is
 * closed with its totals; billing then holds only what was admitted and not settled. A report
 * whose sequence billing has passed changes nothing (the lease then waits for its deadline).
 */
export async function returnLeases(ctx: BillingContext, req: ReturnLeasesRequest): Promise<ReturnLeasesResponse> {
  validateEdgeCall(req);
  validateReports(req.leases);
  const ids = req.leases.map((r) => r.leaseId).filter(isUuid);
  const caller = { edgeId: req.edgeId, incarnation: await incarnationOf(ctx, req), bootId: req.bootId };
  if (ids.length === 0)
    return { leases: req.leases.map((r) => unknownLease(r.leaseId)), incarnation: caller.incarnation };
  const inList = ids.map(() => "?").join(", ");
  return withDeadlockRetry(() =>
    ctx.orm.em.fork().transactional(async (em) => {
      await holdIncarnation(em, caller);
      const now = ctx.clock();
      const owners = await em.execute(
        `select distinct account_id from leases where edge_id = ? and id in (${inList})`,
        [req.edgeId, ...ids],
      );
      const wallets = await lockWallets(
        em,
        owners.map((row) => row.account_id as string),
      );
      const leases = await loadLeases(em, `l.edge_id = ? and l.id in (${inList})`, [req.edgeId, ...ids]);
      for (const lease of leases) {
        const report = req.leases.find((r) => r.leaseId === lease.id)!;
        if (await applyReport(em, lease, { ...report, final: true }, req.sequence, now)) {
          await closeReported(em, lease, wallets.get(lease.accountId)!, now, ctx.config.MAX_REQUEST_MS);
        }
      }
      const known = new Set(leases.map((l) => l.id));
      return {
        leases: [
          ...leases.map((lease) => leaseState(lease, now, ctx.config)),
          ...req.leases.filter((r) => !known.has(r.leaseId)).map((r) => unknownLease(r.leaseId)),
        ],
        incarnation: caller.incarnation,
      };
    }),
  );
}
