import { fileURLToPath } from "node:url";
import { commonSpecs, host, intBetween, listenPort, loadConfig, makeValidator, secret, str } from "@mkt/runtime/config";
import { tlsSpecs } from "@mkt/runtime/service-tls";
import { DEFAULT_LEASE_IDLE_MS } from "./leases/lease-table.ts";

/** Comma-separated IPs or CIDRs (e.g. "10.0.0.0/8,127.0.0.1"); empty trusts no proxy. */
const proxyList = makeValidator<string[]>((value) =>
  value
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry !== ""),
);

/** The edge's settings: where the backends are, how it listens, and the admin secret. */
export function loadEdgeConfig(env: NodeJS.ProcessEnv = process.env) {
  return loadConfig(
    {
      LOG_LEVEL: commonSpecs.LOG_LEVEL,
      NATS_URL: commonSpecs.NATS_URL,
      NATS_USER: commonSpecs.NATS_USER,
      NATS_PASSWORD: commonSpecs.NATS_PASSWORD,
      EVENTS_PREFIX: commonSpecs.EVENTS_PREFIX,
      // The edge's certificate for calling the services (mTLS, docs/deploy.md "Service identities").
      ...tlsSpecs,
      HOST: host({ default: "127.0.0.1" }),
      PORT: listenPort({ default: 8080 }),
      ACCOUNTS_ADDR: str({ default: "127.0.0.1:50051" }),
      BILLING_ADDR: str({ default: "127.0.0.1:50052" }),
      REGISTRY_ADDR: str({ default: "127.0.0.1:50053" }),
      // A secret: no default, never logged.
      ADMIN_TOKEN: secret(),
      // Admission leases (DESIGN.md §2.3): billing's setting of the same name, which the edge must
      // match: heartbeats go every half of it and a lease is trusted at most this long past one.
      // Cached principals (§2.1) follow the same clock: revalidated with accounts every half of it
      // while in use, used at most this long past a check, and at most this long past losing NATS.
      LEASE_TTL_MS: intBetween(200, 60_000)({ default: 2_000 }),
      // A lease with nothing admitted and nothing in flight this long is returned to billing with
      // its final totals; until then the heartbeat keeps it open at no per-lease cost, so an
      // account sending now and then is admitted in memory. Its credit beyond one request's worst
      // case goes back after 2 TTL idle (docs/leases.md).
      LEASE_IDLE_MS: intBetween(0, 3_600_000)({ default: DEFAULT_LEASE_IDLE_MS }),
      // Hops whose X-Forwarded-For is believed (Envoy); everyone else is their socket address.
      TRUSTED_PROXIES: proxyList({ default: [] }),
      // Chat prompts can be long; Fastify's 1 MiB default would refuse big contexts.
      BODY_LIMIT_BYTES: intBetween(1024, 64 * 1024 * 1024)({ default: 16 * 1024 * 1024 }),
      // Resolved routes are reused this long (0: ask registry every time). Registry's
      // catalog.changed drops them at once, so the TTL only bounds a lost announcement; see
      // chat/route-cache.ts.
      ROUTE_CACHE_TTL_MS: intBetween(0, 60_000)({ default: 60_000 }),
      // Worker threads counting prompt tokens; each holds its own tokenizer (about 85 MB of RSS).
      PROMPT_TOKEN_THREADS: intBetween(1, 32)({ default: 1 }),
      // Request bodies up to this size have their prompt counted on the main thread (~5 µs for a
      // short prompt, ~0.1 ms at 2 KiB, ~0.4 ms at 8 KiB); larger ones in the workers. 0 sends
      // every prompt there.
      PROMPT_TOKEN_INLINE_BYTES: intBetween(0, 65_536)({ default: 8_192 }),
      // A prompt not counted this long after it arrived (waiting for a worker included) is a 503;
      // counting stops at the context limit, so even a 16 MiB prompt takes well under a second.
      PROMPT_TOKEN_DEADLINE_MS: intBetween(100, 60_000)({ default: 5_000 }),
      // An account's large prompts are counted one at a time; this many more may wait (then 429).
      PROMPT_TOKEN_ACCOUNT_QUEUE: intBetween(0, 10_000)({ default: 64 }),
      // Shutdown: /readyz answers 503 for SHUTDOWN_READINESS_DELAY_MS while requests are still
      // served (load balancers stop sending), then running answers get SHUTDOWN_GRACE_MS to finish.
      SHUTDOWN_READINESS_DELAY_MS: intBetween(0, 60_000)({ default: 0 }),
      SHUTDOWN_GRACE_MS: intBetween(0, 600_000)({ default: 10_000 }),
      // The web portal's built files (npm ci builds them into portal/dist), served at /portal.
      PORTAL_DIR: str({ default: fileURLToPath(new URL("../../portal/dist", import.meta.url)) }),
    },
    env,
  );
}

export type EdgeConfig = ReturnType<typeof loadEdgeConfig>;
