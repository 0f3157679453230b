import type { CallerTable } from "@mkt/runtime/caller-policy";
import type { BillingServiceServer } from "@mkt/proto/billing/v1/billing";

/**
 * Who may call each BillingService RPC (enforced with mTLS on: packages/runtime/src/caller-policy.ts).
 * The edge serves every public route, admits requests on leases and hands billing the usage events
 * JetStream did not ack in time (RecordUsage); no other service calls billing (the edges' usage
 * reaches it over NATS). Money moves (AddCredits) are the edge's alone.
 */
export const BILLING_CALLERS = {
  grantLease: ["edge"],
  heartbeat: ["edge"],
  returnLeases: ["edge"],
  getUsageSummary: ["edge"],
  getUsageTokens: ["edge"],
  getUsageBreakdown: ["edge"],
  exportUsage: ["edge"],
  getGeneration: ["edge"],
  getBalance: ["edge"],
  addCredits: ["edge"],
  setKeyLimit: ["edge"],
  listKeyLimits: ["edge"],
  createSubscription: ["edge"],
  listSubscriptions: ["edge"],
  cancelSubscription: ["edge"],
  pauseSubscription: ["edge"],
  resumeSubscription: ["edge"],
  getHosterEarnings: ["edge"],
  getHosterEarningsByModel: ["edge"],
  listHosterSubscribers: ["edge"],
  recordUsage: ["edge"],
  // The operator's (npm run admin), through the edge's admin API.
  listUsageDeadLetters: ["edge"],
  replayUsageDeadLetters: ["edge"],
} as const satisfies CallerTable<BillingServiceServer>;
