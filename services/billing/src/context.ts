import type { LimitFunction } from "p-limit";
import type { Logger } from "@mkt/runtime/logger";
import type { Orm } from "@mkt/runtime/db";
import type { PromiseClient } from "@mkt/runtime/grpc-client";
import type { SecretBox } from "@mkt/runtime/secret-box";
import type { AccountsServiceClient } from "@mkt/proto/accounts/v1/accounts";
import type { RegistryServiceClient } from "@mkt/proto/registry/v1/registry";
import type { BillingConfig } from "./config.ts";
import type { AnnounceIncarnation, RecallLeases } from "./leases/recall-types.ts";
import type { BillingMetrics } from "./metrics/billing-metrics.ts";

/** What billing's handlers share: the database, the config and a clock tests may set. */
export interface BillingContext {
  orm: Orm;
  config: BillingConfig;
  log: Logger;
  clock: () => Date;
  /** The subscription saga's collaborators: scoped keys (accounts) and plans (registry). */
  accounts: PromiseClient<AccountsServiceClient>;
  registry: PromiseClient<RegistryServiceClient>;
  /** Seals scoped keys' secrets for the replay window (SECRETS_KEY). */
  box: SecretBox;
  /**
   * Accounts whose wallet row is known to exist (committed; wallets are never deleted), so
   * GrantLease skips the statement that opens one. Bounded: emptied when it reaches
   * 100,000 entries, after which it fills again as accounts call.
   */
  openWallets: Set<string>;
  /**
   * Recalls fenced leases or budgets from their edges over NATS and applies the acks
   * (docs/architecture.md#revocation-stops-at-once).
   */
  recallLeases: RecallLeases;
  /** Publishes a new incarnation of an edge to its processes (edge-incarnation.ts). */
  announceIncarnation: AnnounceIncarnation;
  /** This process's Prometheus metrics (one registry per startBilling, served on METRICS_PORT). */
  metrics: BillingMetrics;
  /**
   * Runs a grant's database work with at most GRANTS_AT_ONCE others. Grants beyond it wait
   * here rather than in the pool's queue, ahead of the heartbeats that keep every lease valid.
   */
  grantSlot: LimitFunction;
}

/** The entity manager of a transaction (or of a fork). */
export type Em = Orm["em"];

/** Raw SQL returns bigint columns as strings; this reads one back as bigint (null → 0). */
export function int8(value: unknown): bigint {
  if (value === null || value === undefined) return 0n;
  return BigInt(value as string | number | bigint);
}
