import {
  commonSpecs,
  ConfigError,
  loadConfig,
  host,
  makeValidator,
  intBetween,
  listenPort,
  secretsKey,
  str,
} from "@mkt/runtime/config";
import { usdToMicros } from "@mkt/runtime/money";
import { ADMISSION_MARGIN_MS } from "@mkt/runtime/request-bounds";
import { tlsSpecs } from "@mkt/runtime/service-tls";

/** Request limits of one account tier. */
export interface TierLimits {
  limitPerMinute: bigint;
  limitPerDay: bigint;
}

export type Tiers = Record<string, TierLimits>;

/** TIERS: {"<tier>": {"limit_per_minute": n, "limit_per_day": n}, ...}; must define "free". */
const tiers = makeValidator<Tiers>((value) => {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    throw new Error("must be JSON");
  }
  if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error("must be a JSON object");
  const result: Tiers = {};
  for (const [name, limits] of Object.entries(parsed as Record<string, unknown>)) {
    const l = limits as { limit_per_minute?: unknown; limit_per_day?: unknown } | null;
    const perMinute = l?.limit_per_minute;
    const perDay = l?.limit_per_day;
    if (!Number.isSafeInteger(perMinute) || (perMinute as number) < 0) {
      throw new Error(`tier "${name}": limit_per_minute must be a non-negative integer`);
    }
    if (!Number.isSafeInteger(perDay) || (perDay as number) < 0) {
      throw new Error(`tier "${name}": limit_per_day must be a non-negative integer`);
    }
    result[name] = { limitPerMinute: BigInt(perMinute as number), limitPerDay: BigInt(perDay as number) };
  }
  if (!result.free) throw new Error('must define the "free" tier (used for unknown tiers)');
  return result;
});

/**
 * USAGE_STREAM_REPLICAS: 1, 3 or 5, the sizes JetStream accepts (at most 5) that are odd. A
 * stream's copies agree by majority, so an even count survives no more lost nodes than the odd
 * count below it (2 tolerates none, 4 one) and costs one more copy of every event.
 */
const usageStreamReplicas = makeValidator<number>((value) => {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || ![1, 3, 5].includes(n)) {
    throw new Error("must be 1, 3 or 5 (an odd count up to JetStream's limit of 5)");
  }
  return n;
});

/** A non-negative USD amount, parsed exactly into micro-USD. */
const usdAmount = makeValidator<bigint>((value) => {
  let micros: bigint;
  try {
    micros = usdToMicros(value);
  } catch {
    throw new Error("must be a USD amount such as 5.00");
  }
  if (micros < 0n) throw new Error("must not be negative");
  return micros;
});

/**
 * MAX_REQUEST_MS's least value: an edge cuts an upstream call at MAX_REQUEST_MS − 10 s, which must
 * leave a call at least a second.
 */
const MIN_MAX_REQUEST_MS = ADMISSION_MARGIN_MS + 1_000;

export function loadBillingConfig(env: NodeJS.ProcessEnv = process.env) {
  const config = loadConfig(
    {
      ...commonSpecs,
      ...tlsSpecs,
      GRPC_HOST: host({ default: "127.0.0.1" }),
      // 0 picks a free port (tests).
      GRPC_PORT: listenPort({ default: 50052 }),
      // Plain HTTP on GRPC_HOST, no client certificate: GET /metrics, /healthz, /readyz (probes);
      // 0 picks a free port (tests).
      METRICS_PORT: listenPort({ default: 9465 }),
      TIERS: tiers({ default: { free: { limitPerMinute: 60n, limitPerDay: 1000n } } }),
      STARTING_CREDIT_USD: usdAmount({ default: 5_000_000n }),
      // Admission leases (docs/leases.md#settings). Billing owns these three and sends them in every
      // lease reply; the edges use billing's values and configure none of their own. A lease lives
      // LEASE_TTL_MS past its edge's last heartbeat (edges send one every half of it), and a
      // revoked subscription or key is refused within it.
      LEASE_TTL_MS: intBetween(200, 60_000)({ default: 2_000 }),
      // The longest a request admitted on a lease can still be running: an edge cuts its upstream
      // call at MAX_REQUEST_MS − 10 s (or its UPSTREAM_TOTAL_TIMEOUT_MS, 600 s, if shorter), the
      // 10 s being room for its admission. A lease's final totals hold its requests' worst cases
      // this long past the report. Each lease keeps the value it was granted under.
      MAX_REQUEST_MS: intBetween(MIN_MAX_REQUEST_MS, 24 * 3600_000)({ default: 630_000 }),
      // An edge cut off from billing this long ends its answers in flight, so a lease whose edge
      // never sent its final totals is held, as fully admitted, until its deadline + this (a
      // restarted edge's at once: its next incarnation closes them). Each lease keeps the value it
      // was granted under, so a billing restarted with a shorter one releases nothing early.
      EDGE_ISOLATION_MS: intBetween(1_000, 24 * 3600_000)({ default: 60_000 }),
      // Copies of the usage stream in a JetStream cluster (docs/deploy.md#a-three-node-nats-cluster):
      // billing creates the stream, or updates it to this, at start; nobody else sets it. A single
      // nats-server refuses more than 1, and billing does not start.
      USAGE_STREAM_REPLICAS: usageStreamReplicas({ default: 1 }),
      SETTLE_BATCH_SIZE: intBetween(1, 10_000)({ default: 500 }),
      // The settler pulls again at most this often after a batch: under load the events of one
      // window share a transaction, while a lone event still settles as soon as it arrives. A
      // grant short only by what requests that ended are still holding waits about this long for
      // them to settle before it refuses (docs/settlement.md#the-settlement-window).
      SETTLE_BATCH_WINDOW_MS: intBetween(0, 5_000)({ default: 250 }),
      // How often settled batches' rollup deltas are folded into the usage, hoster and key-spend
      // rollups: reports trail settlement by up to about this
      // (docs/settlement.md#rollups-folded-off-the-settlement-transaction).
      ROLLUP_FOLD_INTERVAL_MS: intBetween(10, 60_000)({ default: 2_000 }),
      // Months of usage records kept besides the current one: older monthly partitions are
      // detached from usage_records (kept as tables of their own for an operator to archive).
      // 0 keeps everything (docs/settlement.md#usage-records-by-month).
      USAGE_RETENTION_MONTHS: intBetween(0, 1_200)({ default: 0 }),
      // Usage records per message of an ExportUsage stream (one keyset-paginated query each).
      USAGE_EXPORT_BATCH_SIZE: intBetween(1, 50_000)({ default: 5_000 }),
      // How often each replica looks for subscriptions whose period has ended (and retries past-due
      // ones). A renewal happens at most this long after period_end; replicas never double-charge.
      RENEWAL_INTERVAL_MS: intBetween(1_000, 24 * 3600_000)({ default: 60_000 }),
      // The subscription saga asks accounts for scoped keys and registry for plans.
      ACCOUNTS_ADDR: str({ default: "127.0.0.1:50051" }),
      REGISTRY_ADDR: str({ default: "127.0.0.1:50053" }),
      // Seals a new subscription's key for its 24 h replay window. A secret: no default, never logged.
      SECRETS_KEY: secretsKey(),
    },
    env,
  );
  // An edge's leases lapse one TTL after its last answered call; ending its answers sooner than
  // that would cut answers on leases still valid.
  if (config.EDGE_ISOLATION_MS <= config.LEASE_TTL_MS) {
    throw new ConfigError(
      `invalid configuration:\n  EDGE_ISOLATION_MS: must be more than LEASE_TTL_MS (${config.EDGE_ISOLATION_MS} ≤ ${config.LEASE_TTL_MS})`,
    );
  }
  return config;
}

export type BillingConfig = ReturnType<typeof loadBillingConfig>;
