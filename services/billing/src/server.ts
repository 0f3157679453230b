import pLimit from "p-limit";
import { openDatabase } from "@mkt/runtime/db";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import { startGrpcServer } from "@mkt/runtime/grpc-server";
import type { Logger } from "@mkt/runtime/logger";
import { startMetricsServer } from "@mkt/runtime/metrics-server";
import { connectNats, eventNames, natsCredentials } from "@mkt/runtime/nats";
import { dependencyReadiness } from "@mkt/runtime/readiness";
import { readServiceTls } from "@mkt/runtime/service-tls";
import { parseSecretsKey, SecretBox } from "@mkt/runtime/secret-box";
import { AccountsServiceClient } from "@mkt/proto/accounts/v1/accounts";
import { BillingServiceService } from "@mkt/proto/billing/v1/billing";
import { RegistryServiceClient } from "@mkt/proto/registry/v1/registry";
import { migrations } from "../migrations/index.ts";
import type { BillingConfig } from "./config.ts";
import type { BillingContext } from "./context.ts";
import { entities } from "./entities.ts";
import { billingService } from "./billing-service.ts";
import { BILLING_CALLERS } from "./billing-callers.ts";
import { createBillingMetrics } from "./metrics/billing-metrics.ts";
import { startSettlementConsumer } from "./settlement/settlement-consumer.ts";
import { startCounterPruner } from "./rate-limits/counter-pruner.ts";
import { incarnationAnnouncer, recallSender } from "./leases/recall-sender.ts";
import { closeDueLeases, startLeaseCloser, type CloseResult } from "./leases/lease-closer.ts";
import { startSubscriptionJanitor, tidySubscriptions, type TidyResult } from "./subscriptions/subscription-janitor.ts";
import { startRenewalScheduler, type RenewalResult } from "./subscriptions/renewal-scheduler.ts";
import { startRollupFolder } from "./usage/rollup-fold.ts";
import { maintainUsagePartitions, startUsagePartitions, type PartitionChanges } from "./usage/usage-partitions.ts";

export interface BillingOptions {
  /** The clock for windows, holds and expiry; tests set it. */
  clock?: () => Date;
  /** How often rate counters of windows long past are deleted (default: every minute). */
  counterPruneIntervalMs?: number;
  /** How often abandoned subscription attempts, unrevoked keys and expired secrets are tidied. */
  janitorIntervalMs?: number;
  /** How often leases past their deadline + EDGE_ISOLATION_MS are closed (default: one LEASE_TTL_MS). */
  leaseCloserIntervalMs?: number;
  /** Whether the lease closer also runs once at start (default: yes; tests that run it themselves say no). */
  leaseCloserAtStart?: boolean;
  /** Overrides RENEWAL_INTERVAL_MS (tests run passes themselves with renewSubscriptions). */
  renewalIntervalMs?: number;
}

export interface BillingHandle {
  port: number;
  /** The plain HTTP listener's port (METRICS_PORT, or the free one picked for 0): /metrics, /healthz, /readyz. */
  metricsPort: number;
  /** Runs one lease closer pass now (billing's clock). */
  closeDueLeases(): Promise<CloseResult>;
  /** Runs one subscription janitor pass now. */
  tidySubscriptions(): Promise<TidyResult>;
  /** Runs one renewal pass now, as of `now` (billing's clock by default). */
  renewSubscriptions(now?: Date): Promise<RenewalResult>;
  /** Folds every settled batch's rollup deltas now (reports otherwise trail by ROLLUP_FOLD_INTERVAL_MS). */
  foldRollups(): Promise<number>;
  /** Runs the usage records' partition maintenance now, as of `now` (billing's clock by default). */
  maintainUsagePartitions(now?: Date): Promise<PartitionChanges>;
  /** Stop accepting → finish the settling batch → nats.drain() → orm.close(). */
  close(): Promise<void>;
}

/**
 * Grants whose database work runs at once, of the pool's 10 connections. The rest are left to
 * a heartbeat's transactions (3 at once, plus its session statement) and settlement: a burst of
 * cold grants (1,000 accounts' first requests) queued ahead of them in the pool delayed
 * heartbeats past the leases' validity, and each lapsed lease asked for a grant in turn.
 */
const GRANTS_AT_ONCE = 5;

/**
 * Opens billing's dependencies, starts the gRPC server, the settlement consumer and the periodic
 * jobs (lease closer, counter pruning, subscription janitor, renewals, usage record partitions).
 */
export async function startBilling(
  config: BillingConfig,
  log: Logger,
  options: BillingOptions = {},
): Promise<BillingHandle> {
  const tls = readServiceTls(config);
  const orm = await openDatabase({
    url: config.DATABASE_URL,
    migrateUrl: config.MIGRATE_DATABASE_URL,
    schema: "billing",
    entities,
    migrations,
    migrate: config.MIGRATE_ON_START,
    log,
  });
  const nc = await connectNats(config.NATS_URL, "billing", log, natsCredentials(config)).catch(async (err: unknown) => {
    await orm.close();
    throw err;
  });
  const accountsClient = createClient(AccountsServiceClient, config.ACCOUNTS_ADDR, tls);
  const registryClient = createClient(RegistryServiceClient, config.REGISTRY_ADDR, tls);
  const closeClients = () => {
    accountsClient.close();
    registryClient.close();
  };
  const ctx: BillingContext = {
    orm,
    config,
    log,
    clock: options.clock ?? (() => new Date()),
    accounts: promiseClient(accountsClient),
    registry: promiseClient(registryClient),
    box: new SecretBox(parseSecretsKey(config.SECRETS_KEY)),
    openWallets: new Set(),
    recallLeases: recallSender(() => ctx, nc, eventNames(config.EVENTS_PREFIX).leaseRecall),
    announceIncarnation: incarnationAnnouncer(nc, eventNames(config.EVENTS_PREFIX).leaseRecall, log),
    metrics: createBillingMetrics(),
    grantSlot: pLimit(GRANTS_AT_ONCE),
  };
  const settler = await startSettlementConsumer(ctx, nc, eventNames(config.EVENTS_PREFIX)).catch(
    async (err: unknown) => {
      closeClients();
      await nc.close();
      await orm.close();
      throw err;
    },
  );
  const stopPruner = startCounterPruner(ctx, options.counterPruneIntervalMs ?? 60_000);
  const stopLeaseCloser = startLeaseCloser(
    ctx,
    options.leaseCloserIntervalMs ?? config.LEASE_TTL_MS,
    options.leaseCloserAtStart ?? true,
  );
  const stopJanitor = startSubscriptionJanitor(ctx, options.janitorIntervalMs ?? 60_000);
  const renewals = startRenewalScheduler(ctx, options.renewalIntervalMs ?? config.RENEWAL_INTERVAL_MS);
  const folder = startRollupFolder(() => orm.em.fork(), config.ROLLUP_FOLD_INTERVAL_MS, log);
  const stopPartitions = startUsagePartitions(() => orm.em.fork(), ctx.clock, config.USAGE_RETENTION_MONTHS, log);
  // When a listener cannot start (its port taken): undo everything started before it.
  const stopBackground = async () => {
    await renewals.stop();
    await stopJanitor();
    await stopLeaseCloser();
    await stopPruner();
    await settler.stop();
    await folder.stop();
    await stopPartitions();
    closeClients();
    await nc.close();
    await orm.close();
  };
  const grpc = await startGrpcServer(
    config.GRPC_HOST,
    config.GRPC_PORT,
    [[BillingServiceService, billingService(ctx, log), BILLING_CALLERS]],
    { tls, log },
  ).catch(async (err: unknown) => {
    await stopBackground();
    throw err;
  });
  let closing = false;
  const metricsServer = await startMetricsServer(
    config.GRPC_HOST,
    config.METRICS_PORT,
    ctx.metrics.registry,
    log,
    dependencyReadiness(orm, nc, () => closing),
  ).catch(async (err: unknown) => {
    await grpc.close();
    await stopBackground();
    throw err;
  });
  log.info({ port: grpc.port, metricsPort: metricsServer.port, tls: tls !== null }, "billing listening");

  return {
    port: grpc.port,
    metricsPort: metricsServer.port,
    closeDueLeases: () => closeDueLeases(ctx),
    tidySubscriptions: () => tidySubscriptions(ctx),
    renewSubscriptions: (now?: Date) => renewals.runOnce(now),
    foldRollups: () => folder.foldNow(),
    maintainUsagePartitions: (now?: Date) =>
      maintainUsagePartitions(orm.em.fork(), now ?? ctx.clock(), config.USAGE_RETENTION_MONTHS),
    async close() {
      closing = true;
      await grpc.close();
      await renewals.stop();
      await stopJanitor();
      await stopLeaseCloser();
      await stopPruner();
      await settler.stop();
      // After the settler, so its last batches' deltas are folded.
      await folder.stop();
      await stopPartitions();
      // After the settler: its last batch still counts in a final scrape until here.
      await metricsServer.close();
      closeClients();
      await nc.drain();
      await orm.close();
    },
  };
}
