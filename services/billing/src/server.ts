import { openDatabase } from "@mkt/runtime/db";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import { startGrpcServer } from "@mkt/runtime/grpc-server";
import type { Logger } from "@mkt/runtime/logger";
import { connectNats, eventNames } from "@mkt/runtime/nats";
import { parseSecretsKey, SecretBox } from "@mkt/runtime/secret-box";
import { AccountsServiceClient } from "@mkt/proto/accounts/v1/accounts";
import { BillingServiceService } from "@mkt/proto/billing/v1/billing";
import { RegistryServiceClient } from "@mkt/proto/registry/v1/registry";
import { migrations } from "../migrations/index.ts";
import type { BillingConfig } from "./config.ts";
import type { BillingContext } from "./context.ts";
import { entities } from "./entities.ts";
import { billingService } from "./billing-service.ts";
import { startSettlementConsumer } from "./settlement/settlement-consumer.ts";
import { startSweeper, sweepExpiredReservations, type SweepResult } from "./reservations/reservation-sweeper.ts";
import { startSubscriptionJanitor, tidySubscriptions, type TidyResult } from "./subscriptions/subscription-janitor.ts";
import { startRenewalScheduler, type RenewalResult } from "./subscriptions/renewal-scheduler.ts";

export interface BillingOptions {
  /** The clock for windows, holds and expiry; tests set it. */
  clock?: () => Date;
  /** How often the reservation sweeper runs (DESIGN.md §2: about every 30 s). */
  sweepIntervalMs?: number;
  /** How often abandoned subscription attempts, unrevoked keys and expired secrets are tidied. */
  janitorIntervalMs?: number;
  /** Overrides RENEWAL_INTERVAL_MS (tests run passes themselves with renewSubscriptions). */
  renewalIntervalMs?: number;
}

export interface BillingHandle {
  port: number;
  /** Runs one expiry sweep now (it still waits for an idle settlement consumer). */
  sweepExpiredReservations(): Promise<SweepResult>;
  /** Runs one subscription janitor pass now. */
  tidySubscriptions(): Promise<TidyResult>;
  /** Runs one renewal pass now, as of `now` (billing's clock by default). */
  renewSubscriptions(now?: Date): Promise<RenewalResult>;
  /** Stop accepting → finish the settling batch → nats.drain() → orm.close(). */
  close(): Promise<void>;
}

/** Opens billing's dependencies, starts the gRPC server, the settlement consumer and the sweeper. */
export async function startBilling(
  config: BillingConfig,
  log: Logger,
  options: BillingOptions = {},
): Promise<BillingHandle> {
  const orm = await openDatabase({
    url: config.DATABASE_URL,
    schema: "billing",
    entities,
    migrations,
    migrate: config.MIGRATE_ON_START,
    log,
  });
  const nc = await connectNats(config.NATS_URL, "billing", log).catch(async (err: unknown) => {
    await orm.close();
    throw err;
  });
  const accountsClient = createClient(AccountsServiceClient, config.ACCOUNTS_ADDR);
  const registryClient = createClient(RegistryServiceClient, config.REGISTRY_ADDR);
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
  };
  const settler = await startSettlementConsumer(ctx, nc, eventNames(config.EVENTS_PREFIX)).catch(
    async (err: unknown) => {
      closeClients();
      await nc.close();
      await orm.close();
      throw err;
    },
  );
  const stopSweeper = startSweeper(ctx, () => settler.isIdle(), options.sweepIntervalMs ?? 30_000);
  const stopJanitor = startSubscriptionJanitor(ctx, options.janitorIntervalMs ?? 60_000);
  const renewals = startRenewalScheduler(ctx, options.renewalIntervalMs ?? config.RENEWAL_INTERVAL_MS);
  const grpc = await startGrpcServer(config.GRPC_HOST, config.GRPC_PORT, [
    [BillingServiceService, billingService(ctx, log)],
  ]).catch(async (err: unknown) => {
    await renewals.stop();
    await stopJanitor();
    await stopSweeper();
    await settler.stop();
    closeClients();
    await nc.close();
    await orm.close();
    throw err;
  });
  log.info({ port: grpc.port }, "billing listening");

  return {
    port: grpc.port,
    sweepExpiredReservations: () => sweepExpiredReservations(ctx, () => settler.isIdle()),
    tidySubscriptions: () => tidySubscriptions(ctx),
    renewSubscriptions: (now?: Date) => renewals.runOnce(now),
    async close() {
      await grpc.close();
      await renewals.stop();
      await stopJanitor();
      await stopSweeper();
      await settler.stop();
      closeClients();
      await nc.drain();
      await orm.close();
    },
  };
}
