import type { LeaseRecallAck } from "@mkt/proto/billing/v1/leases";
import type { BillingContext } from "../context.ts";
import { withDeadlockRetry } from "./deadlock-retry.ts";
import type { FencedLease } from "./recall-types.ts";
import { closeReported, returnBudgetRoom } from "./lease-closing.ts";
import { applyReport } from "./lease-reports.ts";
import { loadLeases, lockWalletsOf } from "./lease-store.ts";
import { validateReports } from "./lease-validation.ts";

/**
 * Applies an edge's recall ack as that lease's report at the ack's sequence
 * (docs/architecture.md#revocation-stops-at-once): a whole lease's ack is final, so the lease
 * closes the way a final report closes it (billing then holds only what was admitted, and unused
 * request room goes back to its window); a budget's ack carries the lease's current totals. An edge
 * that holds no such lease (`known` false: already returned) has nothing to report. Only the wallet
 * is locked: applying totals reads no subscription, so this takes one lock and cannot cross another
 * transaction's order.
 */
export async function applyRecallAck(
  ctx: BillingContext,
  holder: FencedLease,
  subscriptionId: string,
  ack: LeaseRecallAck,
): Promise<void> {
  const report = ack.report;
  if (!ack.known || !report || report.leaseId !== holder.leaseId) return;
  validateReports([report]);
  // Only a whole-lease recall may close the lease, whatever the report says.
  const final = subscriptionId === "" && report.final;
  await withDeadlockRetry(() =>
    ctx.orm.em.fork().transactional(async (em) => {
      // The wallet of the lease's account, found in the statement that locks it (none: not this edge's).
      const wallets = await lockWalletsOf(em, (l) =>
        l.and([l("l.id", "=", holder.leaseId), l("l.edge_id", "=", holder.edgeId)]),
      );
      if (wallets.size === 0) return;
      const [lease] = await loadLeases(em, (l) => l("l.id", "=", holder.leaseId));
      if (!lease) return;
      const now = ctx.clock();
      const applied = await applyReport(em, lease, { ...report, final }, ack.sequence, now);
      if (applied && final) {
        await closeReported(em, lease, wallets.get(lease.accountId)!, now, ctx.config.MAX_REQUEST_MS);
      } else if (subscriptionId && lease.status !== "closed") {
        // Applied now, or a later report (sent after the edge dropped the budget) was: either
        // way the budget's admitted totals are final.
        await returnBudgetRoom(em, lease, subscriptionId, now);
      }
    }),
  );
}
