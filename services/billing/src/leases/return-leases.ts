import { isUuid } from "@mkt/runtime/ids";
import type { ReturnLeasesRequest, ReturnLeasesResponse } from "@mkt/proto/billing/v1/leases";
import type { LeaseWhere } from "../billing-db.ts";
import type { BillingContext } from "../context.ts";
import { withDeadlockRetry } from "./deadlock-retry.ts";
import { leaseState, unknownLease } from "./lease-state.ts";
import { leaseSettings } from "./lease-settings.ts";
import { closeReported } from "./lease-closing.ts";
import { applyReport } from "./lease-reports.ts";
import { loadLeases, lockWalletsOf } from "./lease-store.ts";
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
    return {
      leases: req.leases.map((r) => unknownLease(r.leaseId)),
      incarnation: caller.incarnation,
      settings: leaseSettings(ctx.config),
    };
  return withDeadlockRetry(() =>
    ctx.orm.em.fork().transactional(async (em) => {
      await holdIncarnation(em, caller);
      const now = ctx.clock();
      // The edge's leases among those it names: their wallets locked in the statement that finds them.
      const returned: LeaseWhere = (l) =>
        l.and([l("l.edge_id", "=", req.edgeId), l("l.id", "=", l.fn.any(l.val(ids)))]);
      const wallets = await lockWalletsOf(em, returned);
      const leases = await loadLeases(em, returned);
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
        settings: leaseSettings(ctx.config),
      };
    }),
  );
}
