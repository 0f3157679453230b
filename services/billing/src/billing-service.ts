import type { Logger } from "@mkt/runtime/logger";
import { serverStream, unary } from "@mkt/runtime/grpc-server";
import type { BillingServiceServer } from "@mkt/proto/billing/v1/billing";
import type { BillingContext } from "./context.ts";
import { addCredits } from "./wallets/add-credits.ts";
import { grantLease } from "./leases/grant-lease.ts";
import { heartbeat } from "./leases/heartbeat.ts";
import { returnLeases } from "./leases/return-leases.ts";
import { usageBreakdown } from "./usage/usage-breakdown.ts";
import { exportUsage } from "./usage/usage-export.ts";
import { generation } from "./usage/usage-generation.ts";
import { spendableBalance, usageSummary } from "./usage/usage-summary.ts";
import { usageTokens } from "./usage/usage-tokens.ts";
import { cancelSubscription, listSubscriptions } from "./subscriptions/cancel-subscription.ts";
import { createSubscription } from "./subscriptions/create-subscription.ts";
import { pauseSubscription, resumeSubscription } from "./subscriptions/pause-subscription.ts";
import { renewDueSubscriptions } from "./subscriptions/renewal-scheduler.ts";
import { hosterEarnings, hosterEarningsByModel } from "./earnings/hoster-earnings.ts";
import { listHosterSubscribers } from "./earnings/hoster-subscribers.ts";
import { listKeyLimits, setKeyLimit } from "./key-limits/key-limits.ts";
import { listUsageDeadLetters, replayUsageDeadLetters } from "./settlement/replay-dead-letters.ts";
import { recordUsage } from "./settlement/record-usage.ts";

/** The BillingService gRPC handlers. */
export function billingService(ctx: BillingContext, log: Logger): BillingServiceServer {
  return {
    grantLease: unary(log, "GrantLease", (req, call) => grantLease(ctx, req, () => call.cancelled)),
    heartbeat: unary(log, "Heartbeat", (req) => heartbeat(ctx, req)),
    returnLeases: unary(log, "ReturnLeases", (req) => returnLeases(ctx, req)),
    getUsageSummary: unary(log, "GetUsageSummary", (req) => usageSummary(ctx, req)),
    getUsageTokens: unary(log, "GetUsageTokens", (req) => usageTokens(ctx, req)),
    getUsageBreakdown: unary(log, "GetUsageBreakdown", (req) => usageBreakdown(ctx, req)),
    exportUsage: serverStream(log, "ExportUsage", (call) => exportUsage(ctx, call)),
    getGeneration: unary(log, "GetGeneration", (req) => generation(ctx, req)),
    getBalance: unary(log, "GetBalance", async (req) => ({
      creditBalanceMicros: await spendableBalance(ctx, req.accountId),
    })),
    addCredits: unary(log, "AddCredits", async (req) => {
      const added = await addCredits(ctx, req);
      // A top-up is when a past-due subscription can be paid: renew the account's due ones now
      // rather than at the next pass. The answer's balance is then what is left after them.
      const renewed = await renewDueSubscriptions(ctx, ctx.clock(), req.accountId).catch((err: unknown) => {
        log.warn({ err, accountId: req.accountId }, "renewal after a top-up failed; the next pass retries");
        return { renewed: 0 };
      });
      if (renewed.renewed === 0) return added;
      return { ...added, creditBalanceMicros: await spendableBalance(ctx, req.accountId) };
    }),
    setKeyLimit: unary(log, "SetKeyLimit", (req) => setKeyLimit(ctx, req)),
    listKeyLimits: unary(log, "ListKeyLimits", (req) => listKeyLimits(ctx, req)),
    createSubscription: unary(log, "CreateSubscription", (req) => createSubscription(ctx, req)),
    listSubscriptions: unary(log, "ListSubscriptions", (req) => listSubscriptions(ctx, req.accountId)),
    cancelSubscription: unary(log, "CancelSubscription", (req) => cancelSubscription(ctx, req)),
    pauseSubscription: unary(log, "PauseSubscription", (req) => pauseSubscription(ctx, req)),
    resumeSubscription: unary(log, "ResumeSubscription", (req) => resumeSubscription(ctx, req)),
    getHosterEarnings: unary(log, "GetHosterEarnings", (req) => hosterEarnings(ctx, req)),
    getHosterEarningsByModel: unary(log, "GetHosterEarningsByModel", (req) => hosterEarningsByModel(ctx, req)),
    listHosterSubscribers: unary(log, "ListHosterSubscribers", (req) => listHosterSubscribers(ctx, req.hosterId)),
    recordUsage: unary(log, "RecordUsage", (req) => recordUsage(ctx, req, log.child({ component: "settler" }))),
    listUsageDeadLetters: unary(log, "ListUsageDeadLetters", () => listUsageDeadLetters(ctx)),
    replayUsageDeadLetters: unary(log, "ReplayUsageDeadLetters", (req) =>
      replayUsageDeadLetters(ctx, req, log.child({ component: "settler" })),
    ),
  };
}
