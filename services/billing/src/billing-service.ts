import type { Logger } from "@mkt/runtime/logger";
import { serverStream, unary } from "@mkt/runtime/grpc-server";
import type { BillingServiceServer } from "@mkt/proto/billing/v1/billing";
import type { BillingContext } from "./context.ts";
import { authorize } from "./reservations/authorize.ts";
import { releaseSlot } from "./reservations/release-slot.ts";
import { addCredits } from "./wallets/add-credits.ts";
import { usageBreakdown } from "./usage/usage-breakdown.ts";
import { exportUsage } from "./usage/usage-export.ts";
import { spendableBalance, usageSummary } from "./usage/usage-summary.ts";
import { usageTokens } from "./usage/usage-tokens.ts";
import { cancelSubscription, listSubscriptions } from "./subscriptions/cancel-subscription.ts";
import { createSubscription } from "./subscriptions/create-subscription.ts";

/** The BillingService gRPC handlers. */
export function billingService(ctx: BillingContext, log: Logger): BillingServiceServer {
  return {
    authorize: unary(log, "Authorize", (req) => authorize(ctx, req)),
    releaseSlot: unary(log, "ReleaseSlot", async (req) => {
      await releaseSlot(ctx, req.reservationId);
      return {};
    }),
    getUsageSummary: unary(log, "GetUsageSummary", (req) => usageSummary(ctx, req.accountId, req.tier)),
    getUsageTokens: unary(log, "GetUsageTokens", (req) => usageTokens(ctx, req)),
    getUsageBreakdown: unary(log, "GetUsageBreakdown", (req) => usageBreakdown(ctx, req)),
    exportUsage: serverStream(log, "ExportUsage", (call) => exportUsage(ctx, call)),
    getBalance: unary(log, "GetBalance", async (req) => ({
      creditBalanceMicros: await spendableBalance(ctx, req.accountId),
    })),
    addCredits: unary(log, "AddCredits", (req) => addCredits(ctx, req)),
    createSubscription: unary(log, "CreateSubscription", (req) => createSubscription(ctx, req)),
    listSubscriptions: unary(log, "ListSubscriptions", (req) => listSubscriptions(ctx, req.accountId)),
    cancelSubscription: unary(log, "CancelSubscription", (req) => cancelSubscription(ctx, req)),
  };
}
