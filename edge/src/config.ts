import { commonSpecs, host, intBetween, listenPort, loadConfig, makeValidator, secret, str } from "@mkt/runtime/config";

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
      EVENTS_PREFIX: commonSpecs.EVENTS_PREFIX,
      HOST: host({ default: "127.0.0.1" }),
      PORT: listenPort({ default: 8080 }),
      ACCOUNTS_ADDR: str({ default: "127.0.0.1:50051" }),
      BILLING_ADDR: str({ default: "127.0.0.1:50052" }),
      REGISTRY_ADDR: str({ default: "127.0.0.1:50053" }),
      // A secret: no default, never logged.
      ADMIN_TOKEN: secret(),
      // Authenticated keys are re-checked after this; a revocation drops them at once (keys.revoked).
      PRINCIPAL_CACHE_TTL_MS: intBetween(0, 3_600_000)({ default: 60_000 }),
      // Hops whose X-Forwarded-For is believed (Envoy); everyone else is their socket address.
      TRUSTED_PROXIES: proxyList({ default: [] }),
      // Chat prompts can be long; Fastify's 1 MiB default would refuse big contexts.
      BODY_LIMIT_BYTES: intBetween(1024, 64 * 1024 * 1024)({ default: 16 * 1024 * 1024 }),
      // Resolved routes are reused this long (0: ask registry every time); see chat/route-cache.ts.
      ROUTE_CACHE_TTL_MS: intBetween(0, 60_000)({ default: 1_000 }),
      // AuthorizeBatch calls in flight at once; requests arriving meanwhile wait and go in the next.
      AUTHORIZE_MAX_IN_FLIGHT: intBetween(1, 64)({ default: 2 }),
      AUTHORIZE_MAX_BATCH: intBetween(1, 1_000)({ default: 256 }),
      // Worker threads counting prompt tokens; each holds its own tokenizer (about 85 MB of RSS).
      PROMPT_TOKEN_THREADS: intBetween(1, 32)({ default: 1 }),
      // Request bodies up to this size have their prompt counted on the main thread (~5 µs for a
      // short prompt, ~0.1 ms at 2 KiB, ~0.4 ms at 8 KiB); larger ones in the workers. 0 sends
      // every prompt there.
      PROMPT_TOKEN_INLINE_BYTES: intBetween(0, 65_536)({ default: 8_192 }),
      // Shutdown: /readyz answers 503 for SHUTDOWN_READINESS_DELAY_MS while requests are still
      // served (load balancers stop sending), then running answers get SHUTDOWN_GRACE_MS to finish.
      SHUTDOWN_READINESS_DELAY_MS: intBetween(0, 60_000)({ default: 0 }),
      SHUTDOWN_GRACE_MS: intBetween(0, 600_000)({ default: 10_000 }),
    },
    env,
  );
}

export type EdgeConfig = ReturnType<typeof loadEdgeConfig>;
