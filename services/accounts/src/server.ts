import { openDatabase } from "@mkt/runtime/db";
import { startGrpcServer } from "@mkt/runtime/grpc-server";
import type { Logger } from "@mkt/runtime/logger";
import { startMetricsServer } from "@mkt/runtime/metrics-server";
import { repeatEvery } from "@mkt/runtime/periodic";
import { connectNats, eventNames, natsCredentials } from "@mkt/runtime/nats";
import { dependencyReadiness } from "@mkt/runtime/readiness";
import { readServiceTls } from "@mkt/runtime/service-tls";
import { collectDefaultMetrics, Registry } from "prom-client";
import { AccountsServiceService } from "@mkt/proto/accounts/v1/accounts";
import { migrations } from "../migrations/index.ts";
import type { AccountsConfig } from "./config.ts";
import type { AccountsContext } from "./context.ts";
import { entities } from "./entities.ts";
import { accountsService } from "./accounts-service.ts";
import { ACCOUNTS_CALLERS } from "./accounts-callers.ts";
import { KEY_HOLDER_PRUNE_INTERVAL_MS, pruneKeyHolders } from "./keys/key-holders.ts";

export interface AccountsOptions {
  /** The clock of the per-IP sign-up windows; tests set it. */
  clock?: () => Date;
}

export interface AccountsHandle {
  port: number;
  /** The plain HTTP listener's port (METRICS_PORT: /metrics, /healthz, /readyz). */
  metricsPort: number;
  /** Stop accepting → finish running calls → nats.drain() → orm.close(). */
  close(): Promise<void>;
}

/** Opens accounts' database and NATS connection and starts its gRPC server. */
export async function startAccounts(
  config: AccountsConfig,
  log: Logger,
  options: AccountsOptions = {},
): Promise<AccountsHandle> {
  const tls = readServiceTls(config);
  const orm = await openDatabase({
    url: config.DATABASE_URL,
    migrateUrl: config.MIGRATE_DATABASE_URL,
    schema: "accounts",
    entities,
    migrations,
    migrate: config.MIGRATE_ON_START,
    log,
  });
  const nc = await connectNats(config.NATS_URL, "accounts", log, natsCredentials(config)).catch(
    async (err: unknown) => {
      await orm.close();
      throw err;
    },
  );
  const ctx: AccountsContext = {
    orm,
    config,
    log,
    nc,
    names: eventNames(config.EVENTS_PREFIX),
    clock: options.clock ?? (() => new Date()),
  };
  const grpc = await startGrpcServer(
    config.GRPC_HOST,
    config.GRPC_PORT,
    [[AccountsServiceService, accountsService(ctx), ACCOUNTS_CALLERS]],
    { tls, log },
  ).catch(async (err: unknown) => {
    await nc.close();
    await orm.close();
    throw err;
  });
  // Accounts defines no metrics of its own: the process's (heap, event loop, GC) and the probes.
  const metrics = new Registry();
  collectDefaultMetrics({ register: metrics });
  let closing = false;
  const metricsServer = await startMetricsServer(
    config.GRPC_HOST,
    config.METRICS_PORT,
    metrics,
    log,
    dependencyReadiness(orm, nc, () => closing),
  ).catch(async (err: unknown) => {
    await grpc.close();
    await nc.close();
    await orm.close();
    throw err;
  });
  const stopPrune = repeatEvery(
    KEY_HOLDER_PRUNE_INTERVAL_MS,
    () => pruneKeyHolders(orm.em.fork()),
    log,
    "key holder prune",
  );
  log.info({ port: grpc.port, metricsPort: metricsServer.port, tls: tls !== null }, "accounts listening");

  return {
    port: grpc.port,
    metricsPort: metricsServer.port,
    async close() {
      closing = true;
      await stopPrune();
      await grpc.close();
      await metricsServer.close();
      await nc.drain();
      await orm.close();
    },
  };
}
