import { openDatabase, type Orm } from "@mkt/runtime/db";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import { startGrpcServer } from "@mkt/runtime/grpc-server";
import type { Logger } from "@mkt/runtime/logger";
import { startMetricsServer } from "@mkt/runtime/metrics-server";
import { connectNats, eventNames, natsCredentials, type NatsConnection } from "@mkt/runtime/nats";
import { dependencyReadiness } from "@mkt/runtime/readiness";
import { parseSecretsKey, SecretBox } from "@mkt/runtime/secret-box";
import { readServiceTls } from "@mkt/runtime/service-tls";
import { AccountsServiceClient } from "@mkt/proto/accounts/v1/accounts";
import { RegistryServiceService } from "@mkt/proto/registry/v1/registry";
import { migrations } from "../migrations/index.ts";
import { catalogAnnouncer } from "./catalog/catalog-announcer.ts";
import { CatalogFeed } from "./catalog/catalog-feed.ts";
import { followCatalogNudges } from "./catalog/catalog-nudges.ts";
import { buildCatalogTable, platformTableModels, type PlatformOffer } from "./catalog/catalog-table.ts";
import { hosterCatalog } from "./catalog/hoster-catalog.ts";
import { openCatalog } from "./catalog/open-catalog.ts";
import { compositeCatalog, type ModelCatalog } from "./catalog/model-catalog.ts";
import { platformCatalog } from "./catalog/platform-catalog.ts";
import type { RegistryConfig } from "./config.ts";
import { entities } from "./entities.ts";
import { startHealthProber } from "./hosters/health-prober.ts";
import { HosterStore } from "./hosters/hoster-store.ts";
import type { HostersContext } from "./hosters/hosters-context.ts";
import { startHosterUsageConsumer, type HosterUsageConsumer } from "./hosters/hoster-usage-consumer.ts";
import { EndpointMinutesStore } from "./hosters/endpoint-minutes-store.ts";
import { deadLetterUsage, type UsageDeadLetterContext } from "./hosters/usage-dead-letters.ts";
import { VerificationStore } from "./verification/verification-store.ts";
import { startVerifier, verifyAllEndpoints } from "./verification/verifier.ts";
import { createRegistryMetrics } from "./metrics/registry-metrics.ts";
import { ProductStore } from "./products/product-store.ts";
import { registryService } from "./registry-service.ts";
import { REGISTRY_CALLERS } from "./registry-callers.ts";
import { hosterAgent } from "@mkt/runtime/hoster-connector";
import { countOpenDeadLetters, type DeadLetter } from "@mkt/runtime/usage-dead-letters";

/** Longest time a hoster row is reused for ListModels before it is read again. */
const HOSTER_CACHE_MAX_MS = 5_000;

/** A burst of catalog changes within this long is sent to the edges as one table. */
const CATALOG_DEBOUNCE_MS = 50;

/** The routing table is rebuilt this often even without a nudge (one lost while NATS was down). */
const CATALOG_RESYNC_MS = 30_000;

export interface RegistryOptions {
  /** The clock of hosters' check times; tests may set it. */
  clock?: () => Date;
}

export interface RegistryHandle {
  port: number;
  /** The plain HTTP listener's port (METRICS_PORT, or the free one picked for 0): /metrics, /healthz, /readyz. */
  metricsPort: number;
  /**
   * Stop accepting → end the catalog watches, let running calls finish (grace) → stop the prober
   * and the usage consumer → nats.drain() → orm.close().
   */
  close(graceMs?: number): Promise<void>;
  /** Runs one verification round of every open endpoint now (as the VERIFY_INTERVAL_MS loop does). */
  verifyNow(): Promise<void>;
}

/** Opens registry's dependencies and starts its gRPC server and the hoster health prober. */
export async function startRegistry(
  config: RegistryConfig,
  log: Logger,
  options: RegistryOptions = {},
): Promise<RegistryHandle> {
  const tls = readServiceTls(config);
  const orm = await openDatabase({
    url: config.DATABASE_URL,
    migrateUrl: config.MIGRATE_DATABASE_URL,
    schema: "registry",
    entities,
    migrations,
    migrate: config.MIGRATE_ON_START,
    log,
  });
  const nc = await connectNats(config.NATS_URL, "registry", log, natsCredentials(config)).catch(
    async (err: unknown) => {
      await orm.close();
      throw err;
    },
  );
  const names = eventNames(config.EVENTS_PREFIX);
  const accountsClient = createClient(AccountsServiceClient, config.ACCOUNTS_ADDR, tls);
  const agent = hosterAgent({
    allowPrivate: config.ALLOW_PRIVATE_UPSTREAMS,
    connectTimeoutMs: config.HOSTER_CHECK_TIMEOUT_MS,
  });
  const publishCatalogChange = catalogAnnouncer(nc, names.catalogChanged, log);
  const hosters: HostersContext = {
    store: new HosterStore(orm),
    products: new ProductStore(orm),
    minutes: new EndpointMinutesStore(orm),
    verification: new VerificationStore(orm),
    box: new SecretBox(parseSecretsKey(config.SECRETS_KEY)),
    accounts: promiseClient(accountsClient),
    checks: { agent, timeoutMs: config.HOSTER_CHECK_TIMEOUT_MS },
    allowPrivate: config.ALLOW_PRIVATE_UPSTREAMS,
    announce: (hosterId) => {
      // This replica forgets at once, before any edge can hear of the change and ask it again,
      // and sends its watchers the new table without waiting for NATS to echo the nudge.
      hosterRows.forget(hosterId);
      catalogFeed.changed();
      publishCatalogChange(hosterId);
    },
    log,
    clock: options.clock ?? (() => new Date()),
  };
  const metrics = createRegistryMetrics(() => hosters.minutes.stats(hosters.clock()));
  const startedAt = new Date();
  // Local models first, then cloud: normal keys see them in this order, so `auto` picks a local one.
  const offers: PlatformOffer[] = [
    {
      provider: "local",
      models: config.LOCAL_MODELS,
      servers: config.LOCAL_MODEL_URL.map((url) => ({ url, token: config.LOCAL_MODEL_TOKEN })),
    },
  ];
  if (config.CLOUD_BASE_URL && config.CLOUD_API_KEY && config.CLOUD_MODELS) {
    offers.push({
      provider: "cloud",
      models: config.CLOUD_MODELS,
      servers: [{ url: config.CLOUD_BASE_URL, token: config.CLOUD_API_KEY }],
    });
  }
  const platformModels = platformTableModels(offers, startedAt);
  const catalogFeed = new CatalogFeed({
    build: () =>
      buildCatalogTable({
        platformModels,
        hosters: hosters.store,
        products: hosters.products,
        minutes: hosters.minutes,
        verification: hosters.verification,
        clock: hosters.clock,
        box: hosters.box,
        log,
      }),
    debounceMs: CATALOG_DEBOUNCE_MS,
    resyncMs: CATALOG_RESYNC_MS,
    log,
  });
  const hosterRows = hosterCatalog({
    store: hosters.store,
    // A change to a hoster reaches ListModels at once through catalog.changed (below), and
    // within one probe interval (5 s at most) should that announcement be lost.
    cacheTtlMs: Math.min(config.HOSTER_PROBE_INTERVAL_MS, HOSTER_CACHE_MAX_MS),
    log,
  });
  // Every replica drops its cached hoster rows on any replica's announcement, so a ListModels
  // after it reads the new state, whichever replica it asks; and rebuilds its routing table, so a
  // change made on one replica reaches the edges watching any other.
  followCatalogNudges(
    nc,
    names.catalogChanged,
    (hosterId) => {
      hosterRows.forget(hosterId);
      catalogFeed.changed();
    },
    log,
  );
  // The first table is built now, so the edges' first watch gets it without waiting.
  catalogFeed.changed();
  // A scoped key sees only its hoster's models (each catalog's rule).
  const catalog: ModelCatalog = compositeCatalog(
    ...offers.map((offer) => platformCatalog(offer.provider, offer.models, startedAt)),
    hosterRows,
    openCatalog(() => catalogFeed.table()),
  );
  const usageDeadLetters: UsageDeadLetterContext = { orm, figures: hosters, metrics, clock: hosters.clock, log };
  let usageFigures: HosterUsageConsumer | undefined;
  const cleanup = async () => {
    await catalogFeed.close();
    await usageFigures?.stop();
    accountsClient.close();
    await agent.close();
    await drainNats(nc, log);
    await orm.close();
  };
  try {
    metrics.usageDeadLetters.set(await countOpenDeadLetters(orm));
    const deadLetters = (letters: readonly DeadLetter[]) => deadLetterUsage(usageDeadLetters, letters);
    const transaction = <T>(work: (em?: Orm["em"]) => Promise<T>) => orm.em.fork().transactional((em) => work(em));
    usageFigures = await startHosterUsageConsumer(
      nc,
      names,
      { ...hosters, transaction, deadLetters },
      metrics.usageMismatches,
      log,
    );
  } catch (err) {
    await cleanup();
    throw err;
  }
  const grpc = await startGrpcServer(
    config.GRPC_HOST,
    config.GRPC_PORT,
    [
      [
        RegistryServiceService,
        registryService({ catalog, usageDeadLetters }, hosters, catalogFeed, log),
        REGISTRY_CALLERS,
      ],
    ],
    { tls, log },
  ).catch(async (err: unknown) => {
    await cleanup();
    throw err;
  });
  let closing: Promise<void> | undefined;
  const metricsServer = await startMetricsServer(
    config.GRPC_HOST,
    config.METRICS_PORT,
    metrics.registry,
    log,
    dependencyReadiness(orm, nc, () => closing !== undefined),
  ).catch(async (err: unknown) => {
    await grpc.close(0);
    await cleanup();
    throw err;
  });
  const stopProber = startHealthProber(hosters, {
    intervalMs: config.HOSTER_PROBE_INTERVAL_MS,
    unhealthyAfter: config.HOSTER_UNHEALTHY_AFTER,
  });
  const stopVerifier = startVerifier(hosters, config.VERIFY_INTERVAL_MS);
  log.info(
    {
      port: grpc.port,
      metricsPort: metricsServer.port,
      tls: tls !== null,
      models: config.LOCAL_MODELS.map((m) => m.modelId),
      cloudModels: (config.CLOUD_MODELS ?? []).map((m) => m.modelId),
    },
    "registry listening",
  );

  return {
    port: grpc.port,
    metricsPort: metricsServer.port,
    verifyNow: () => verifyAllEndpoints(hosters),
    close(graceMs = config.SHUTDOWN_GRACE_MS) {
      closing ??= (async () => {
        // Watches never end by themselves: ended now (the edges keep their tables and watch
        // another replica, or this one once it is back), as the server stops taking new calls.
        const closed = grpc.close(graceMs);
        await catalogFeed.close();
        await closed;
        await stopProber();
        await stopVerifier();
        await agent.close();
        await usageFigures?.stop();
        await metricsServer.close();
        accountsClient.close();
        await drainNats(nc, log);
        await orm.close();
      })();
      return closing;
    },
  };
}

/**
 * Drains NATS; when it is unreachable (a shutdown during an outage) the drain fails, and the
 * connection is closed instead so the database still closes.
 */
async function drainNats(nc: NatsConnection, log: Logger): Promise<void> {
  try {
    await nc.drain();
  } catch (err) {
    log.warn({ err }, "NATS drain failed; closing the connection");
    await nc.close();
  }
}
