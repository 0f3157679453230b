import { fileURLToPath } from "node:url";
import {
  bool,
  commonSpecs,
  ConfigError,
  host,
  intBetween,
  listenPort,
  loadConfig,
  makeValidator,
  millis,
  numberBetween,
  secret,
  str,
} from "@mkt/runtime/config";
import { tlsSpecs } from "@mkt/runtime/service-tls";
import { defaultEdgeId, EDGE_ID_PATTERN } from "./edge-id.ts";
import { DEFAULT_LEASE_IDLE_MS } from "./leases/lease-table.ts";
import { DEFAULT_MODEL_ALIASES, parseModelAliases, type ModelAlias } from "./routing/model-aliases.ts";

/** Comma-separated IPs or CIDRs (e.g. "10.0.0.0/8,127.0.0.1"); empty trusts no proxy. */
const proxyList = makeValidator<string[]>((value) =>
  value
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry !== ""),
);

/** '' (the default: host name and port) or a NATS subject token. */
const edgeId = makeValidator<string>((value) => {
  if (value !== "" && !EDGE_ID_PATTERN.test(value)) {
    throw new Error("must be 1 to 100 letters, digits, _ or - (it names a NATS subject), e.g. the pod name");
  }
  return value;
});

/** `name=model` pairs, comma-separated (routing/model-aliases.ts); empty: no aliases. */
const modelAliases = makeValidator<ModelAlias[]>((value) => parseModelAliases(value));

/** The edge's settings: where the backends are, how it listens, and the admin secret. */
export function loadEdgeConfig(env: NodeJS.ProcessEnv = process.env) {
  const config = loadConfig(
    {
      // The edge's stable identity: billing knows its leases by it, and a process that starts
      // again under it closes what the previous one held at once (docs/leases.md, "Incarnations").
      // Every edge needs its own; empty: this host's name and PORT.
      EDGE_ID: edgeId({ default: "" }),
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
      // LEASE_TTL_MS, EDGE_ISOLATION_MS and MAX_REQUEST_MS are billing's (docs/leases.md#settings):
      // the edge takes them from every lease reply, and the TTL of its cached principals from
      // accounts' replies. An environment that still sets one here is checked against billing's
      // first reply at start, and the edge refuses to start when they differ (server.ts).
      LEASE_TTL_MS: intBetween(200, 60_000)({ default: undefined }),
      EDGE_ISOLATION_MS: intBetween(1_000, 24 * 3600_000)({ default: undefined }),
      MAX_REQUEST_MS: intBetween(1_000, 24 * 3600_000)({ default: undefined }),
      // A lease with nothing admitted and nothing in flight this long is returned to billing with
      // its final totals; until then the heartbeat keeps it open at no per-lease cost, so an
      // account sending now and then is admitted in memory. Its credit beyond one request's worst
      // case goes back after 2 TTL idle (docs/leases.md).
      LEASE_IDLE_MS: intBetween(0, 3_600_000)({ default: DEFAULT_LEASE_IDLE_MS }),
      // Hops whose X-Forwarded-For is believed (Envoy); everyone else is their socket address.
      TRUSTED_PROXIES: proxyList({ default: [] }),
      // Model names a client cannot change (a coding agent's defaults), served by the model each
      // names; the default sends Claude Code's and Codex CLI's to the agent-sized demo model.
      MODEL_ALIASES: modelAliases({ default: parseModelAliases(DEFAULT_MODEL_ALIASES) }),
      // Chat prompts can be long; Fastify's 1 MiB default would refuse big contexts.
      BODY_LIMIT_BYTES: intBetween(1024, 64 * 1024 * 1024)({ default: 16 * 1024 * 1024 }),
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
      // The relay (relay/): the edge calls the upstream servers of registry's routing table.
      // Lets hoster endpoints be loopback or private addresses: tests and local demos only.
      ALLOW_PRIVATE_UPSTREAMS: bool({ default: false }),
      UPSTREAM_CONNECT_TIMEOUT_MS: millis({ default: 5_000 }),
      UPSTREAM_FIRST_BYTE_TIMEOUT_MS: millis({ default: 30_000 }),
      UPSTREAM_IDLE_TIMEOUT_MS: millis({ default: 30_000 }),
      // Clamped to billing's MAX_REQUEST_MS − 10 s (a log line says so) when that is shorter.
      UPSTREAM_TOTAL_TIMEOUT_MS: millis({ default: 600_000 }),
      // A body past this is cut (a hoster streaming a multi-GB body); 32 MiB holds ~100k streamed
      // tokens, or ~20k with top_logprobs=20.
      UPSTREAM_MAX_RESPONSE_BYTES: intBetween(1_024, Number.MAX_SAFE_INTEGER)({ default: 32 * 1024 * 1024 }),
      // Outlier ejection: live failures in a row that take a server out of this edge's routing,
      // and the first back-off (doubled on each further ejection, at most 8×).
      UPSTREAM_EJECT_AFTER_FAILURES: intBetween(1, 1_000)({ default: 5 }),
      UPSTREAM_EJECT_BACKOFF_MS: millis({ default: 30_000 }),
      // Limit of one probe of an ejected server (GET /health, /v1/models), made to bring it back.
      UPSTREAM_PROBE_TIMEOUT_MS: millis({ default: 5_000 }),
      // The runaway guard: the upstream stops at max_tokens by its own tokenizer, so the relay
      // cuts a choice only once its own count passes ratio × cap + slack. Below 1 the guard would
      // cut answers an honest upstream ended within the cap.
      OUTPUT_RUNAWAY_RATIO: numberBetween(1, 100)({ default: 1.5 }),
      OUTPUT_RUNAWAY_SLACK_TOKENS: intBetween(0, 1_000_000)({ default: 32 }),
      // How long a group of usage events waits for JetStream's acks before the unacked ones go to
      // billing's RecordUsage instead (docs/usage-events.md).
      USAGE_PUBLISH_TIMEOUT_MS: millis({ default: 1_000 }),
      // The longest an answer's last bytes wait for its usage event to be durable; past it the
      // client gets its end and the event is retried from memory (mkt_usage_pending_events).
      USAGE_DURABLE_TIMEOUT_MS: millis({ default: 5_000 }),
    },
    env,
  );
  // With a port the OS picks, every such edge on the host would default to the same id, and each
  // would close the others' leases as it started.
  if (config.EDGE_ID === "" && config.PORT === 0) {
    throw new ConfigError("invalid configuration:\n  EDGE_ID: required when PORT is 0 (each edge needs its own)");
  }
  return { ...config, EDGE_ID: config.EDGE_ID || defaultEdgeId(config.PORT) };
}

export type EdgeConfig = ReturnType<typeof loadEdgeConfig>;
