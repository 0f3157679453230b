import { randomBytes } from "node:crypto";
import { createLogger } from "@mkt/runtime/logger";
import { randomToken } from "@mkt/runtime/ids";
import { freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { freshServiceDatabases } from "@mkt/testkit/service-databases";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { loadAccountsConfig } from "../../services/accounts/src/config.ts";
import { startAccounts } from "../../services/accounts/src/server.ts";
import { loadBillingConfig } from "../../services/billing/src/config.ts";
import { startBilling } from "../../services/billing/src/server.ts";
import type { RenewalResult } from "../../services/billing/src/subscriptions/renewal-scheduler.ts";
import { loadRegistryConfig } from "../../services/registry/src/config.ts";
import { startRegistry } from "../../services/registry/src/server.ts";
import { loadHosterServerConfig } from "../../hoster-server/src/config.ts";
import { startHosterServer } from "../../hoster-server/src/server.ts";
import { loadEdgeConfig } from "../../edge/src/config.ts";
import { startEdge } from "../../edge/src/server.ts";

export const DEMO_PRICES = { input: 500_000n, output: 1_500_000n }; // micro-USD per 1M tokens

export interface RunningSystem {
  /** Base URL of the (first) edge, e.g. http://127.0.0.1:41234 */
  url: string;
  /** Base URLs of every edge; they share one accounts, billing and registry. */
  urls: string[];
  /** The fresh database, as its administrator (the services connect as their own roles). */
  databaseUrl: string;
  eventsPrefix: string;
  adminToken: string;
  /** Each backend service's readiness probe (`GET /readyz` on its metrics port), by service. */
  readyzUrls: { accounts: string; billing: string; registry: string };
  /** Each backend service's gRPC address (mTLS: callers present a service certificate). */
  grpcAddresses: { accounts: string; billing: string; registry: string };
  /** Runs one billing renewal pass as of `now` (a test's clock for renewals: a period ends when it says). */
  /** Folds the rollup queue now: reports show every settled request once it returns. */
  foldRollups(): Promise<number>;
  renewSubscriptions(now: Date): Promise<RenewalResult>;
  /** Runs one verification round of every open endpoint now (then registry rebuilds the routing table). */
  verifyNow(): Promise<void>;
  close(): Promise<void>;
}

/** startSystem's registry runs in the test process: a test can take it away and bring it back. */
export interface RestartableRegistry {
  /** Stops registry (its port then refuses connections, as during a restart). */
  stopRegistry(): Promise<void>;
  /** Starts registry again, on the same state and the same port, after stopRegistry. */
  restartRegistry(): Promise<void>;
}

/**
 * The whole system in this test process: every service is its real implementation listening on
 * a loopback port, talking real gRPC over mTLS (each with its own certificate, checked against
 * the caller tables), a fresh Postgres database with each service's two roles, as deployed
 * (docs/deploy.md, "Database roles"), and fresh NATS subjects.
 */
/**
 * Leases live 10 s here, not the default 2 s: a lease is valid from its grant's send time, and on
 * a busy 2-core runner (two whole systems and a browser at once) a GrantLease can take seconds to
 * come back, leaving the lease already lapsed (503). Tests that need a short TTL set billing's,
 * which the edges take from its replies (and accounts' PRINCIPAL_TTL_MS for cached keys); reports
 * trail admission by one heartbeat (5 s here).
 */
const TEST_LEASE_TTL_MS = "10000";

export async function startSystem(
  overrides: {
    billing?: Record<string, string>;
    registry?: Record<string, string>;
    model?: Record<string, string>;
    accounts?: Record<string, string>;
    edge?: Record<string, string>;
    /** How many edge instances to run side by side (default 1), as behind a load balancer. */
    edges?: number;
    /** A PostgreSQL server of the test's own (fault tests stop it); the shared one by default. */
    postgresUrl?: string;
    /** A nats-server of the test's own (fault tests stop it); the shared one by default. */
    natsUrl?: string;
    /** Registry's clock (its live figures' windows); the real one by default. */
    registryClock?: () => Date;
  } = {},
): Promise<RunningSystem & RestartableRegistry> {
  const log = createLogger("e2e", process.env.E2E_LOG_LEVEL ?? "silent");
  const databases = await freshServiceDatabases(overrides.postgresUrl);
  const eventsPrefix = freshEventsPrefix();
  const natsUrl = overrides.natsUrl ?? TEST_NATS_URL;
  const common = { NATS_URL: natsUrl, EVENTS_PREFIX: eventsPrefix, GRPC_PORT: "0" };
  // Each service runs as its runtime role and migrates as its schema's owner.
  const database = (service: "accounts" | "billing" | "registry") => ({
    DATABASE_URL: databases.services[service].url,
    MIGRATE_DATABASE_URL: databases.services[service].migrateUrl,
  });
  const certs = await testCertificates();
  const modelToken = randomToken(24);
  const adminToken = randomToken(24);

  const model = await startHosterServer(
    loadHosterServerConfig({ HOST: "127.0.0.1", PORT: "0", HOSTER_SERVER_TOKEN: modelToken, ...overrides.model }),
    log,
  );
  const secretsKey = randomBytes(32).toString("hex");
  const accounts = await startAccounts(
    loadAccountsConfig({
      ...common,
      ...database("accounts"),
      ...certs.env("accounts"),
      METRICS_PORT: "0",
      PRINCIPAL_TTL_MS: TEST_LEASE_TTL_MS,
      ...overrides.accounts,
    }),
    log,
  );
  const registryConfig = loadRegistryConfig({
    ...common,
    ...database("registry"),
    ...certs.env("registry"),
    METRICS_PORT: "0",
    ACCOUNTS_ADDR: `127.0.0.1:${accounts.port}`,
    LOCAL_MODEL_URL: model.url,
    LOCAL_MODEL_TOKEN: modelToken,
    SECRETS_KEY: secretsKey,
    // Test hoster servers listen on loopback.
    ALLOW_PRIVATE_UPSTREAMS: "true",
    ...overrides.registry,
  });
  const registryOptions = { clock: overrides.registryClock };
  let registry = await startRegistry(registryConfig, log, registryOptions);
  const registryPort = registry.port;
  // Registry starts before billing, on a port the OS picks: billing calls registry (when a
  // customer subscribes), never the other way round. A port reserved up front could be taken by
  // another test file's outgoing connection before registry listened on it (EADDRINUSE).
  const billing = await startBilling(
    loadBillingConfig({
      ...common,
      ...database("billing"),
      ...certs.env("billing"),
      METRICS_PORT: "0",
      ACCOUNTS_ADDR: `127.0.0.1:${accounts.port}`,
      REGISTRY_ADDR: `127.0.0.1:${registry.port}`,
      SECRETS_KEY: secretsKey,
      LEASE_TTL_MS: TEST_LEASE_TTL_MS,
      // Reports trail settlement by one fold, 2 s by default
      // (docs/settlement.md#rollups-folded-off-the-settlement-transaction): tests that wait for a
      // report to show a request wait less.
      ROLLUP_FOLD_INTERVAL_MS: "200",
      ...overrides.billing,
    }),
    log,
  );
  // Every edge its own EDGE_ID: with one, each would take the other's incarnation and close its leases.
  const edgeConfig = (index: number) =>
    loadEdgeConfig({
      EDGE_ID: `e2e-edge-${index}`,
      ...certs.env("edge"),
      HOST: "127.0.0.1",
      PORT: "0",
      NATS_URL: natsUrl,
      EVENTS_PREFIX: eventsPrefix,
      ACCOUNTS_ADDR: `127.0.0.1:${accounts.port}`,
      BILLING_ADDR: `127.0.0.1:${billing.port}`,
      REGISTRY_ADDR: `127.0.0.1:${registry.port}`,
      ADMIN_TOKEN: adminToken,
      // Test hoster servers (and the local model) listen on loopback.
      ALLOW_PRIVATE_UPSTREAMS: "true",
      ...overrides.edge,
    });
  const edges = await Promise.all(
    Array.from({ length: overrides.edges ?? 1 }, (_, index) => startEdge(edgeConfig(index), log)),
  );
  return {
    url: edges[0]!.url,
    urls: edges.map((edge) => edge.url),
    databaseUrl: databases.databaseUrl,
    eventsPrefix,
    adminToken,
    readyzUrls: {
      accounts: `http://127.0.0.1:${accounts.metricsPort}/readyz`,
      billing: `http://127.0.0.1:${billing.metricsPort}/readyz`,
      registry: `http://127.0.0.1:${registry.metricsPort}/readyz`,
    },
    grpcAddresses: {
      accounts: `127.0.0.1:${accounts.port}`,
      billing: `127.0.0.1:${billing.port}`,
      registry: `127.0.0.1:${registry.port}`,
    },
    renewSubscriptions: (now) => billing.renewSubscriptions(now),
    foldRollups: () => billing.foldRollups(),
    verifyNow: () => registry.verifyNow(),
    stopRegistry: () => registry.close(0),
    async restartRegistry() {
      registry = await startRegistry({ ...registryConfig, GRPC_PORT: registryPort }, log, registryOptions);
    },
    async close() {
      try {
        await Promise.all(edges.map((edge) => edge.close()));
        await registry.close();
        await billing.close();
        await accounts.close();
        await model.close();
      } finally {
        // Roles are cluster-wide: dropped even when a process failed to close.
        await databases.dropRoles();
      }
    },
  };
}

/** Signs up a fresh customer through the public API and returns its key. */
export async function signUp(url: string): Promise<{ apiKey: string; accountId: string; email: string }> {
  const email = `user-${randomToken(6)}@example.com`;
  const res = await fetch(`${url}/v1/accounts`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email, password: "correct horse battery staple" }),
  });
  if (res.status !== 201) throw new Error(`sign-up failed: ${res.status} ${await res.text()}`);
  const body = (await res.json()) as { api_key: string; account_id: string };
  return { apiKey: body.api_key, accountId: body.account_id, email };
}

/** Polls GET /v1/usage until `predicate` holds (settlement is asynchronous, through JetStream). */
export async function waitForUsage<T>(
  url: string,
  apiKey: string,
  predicate: (usage: T) => boolean,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await fetch(`${url}/v1/usage`, { headers: { authorization: `Bearer ${apiKey}` } });
    const usage = (await res.json()) as T;
    if (res.ok && predicate(usage)) return usage;
    if (Date.now() > deadline) throw new Error(`usage never matched: ${JSON.stringify(usage)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
