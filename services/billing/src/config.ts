import {
  commonSpecs,
  loadConfig,
  host,
  makeValidator,
  intBetween,
  listenPort,
  secretsKey,
  str,
} from "@mkt/runtime/config";
import { usdToMicros } from "@mkt/runtime/money";
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

export function loadBillingConfig(env: NodeJS.ProcessEnv = process.env) {
  return loadConfig(
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
      // Admission leases (docs/leases.md#settings): a lease lives this long past its edge's last
      // heartbeat (edges send one every half of it), and a revoked subscription or key is refused
      // within it.
      LEASE_TTL_MS: intBetween(200, 60_000)({ default: 2_000 }),
      // The longest a request admitted on a lease can still be running: the edge's relay cuts it at
      // its UPSTREAM_TOTAL_TIMEOUT_MS (600 s), plus a margin for its admission. A lease's final
      // totals hold its requests' worst cases this long past the report.
      MAX_REQUEST_MS: intBetween(1_000, 24 * 3600_000)({ default: 630_000 }),
      // The edge's setting of the same name, which billing must match: an edge cut off from billing
      // this long ends its answers in flight, so a lease whose edge never sent its final totals is
      // held, as fully admitted, until its deadline + this (a restarted edge's at once: its next
      // incarnation closes them). See docs/leases.md.
      EDGE_ISOLATION_MS: intBetween(1_000, 24 * 3600_000)({ default: 60_000 }),
      SETTLE_BATCH_SIZE: intBetween(1, 10_000)({ default: 500 }),
      // The settler pulls again at most this often after a batch: under load the events of one
      // window share a transaction, while a lone event still settles as soon as it arrives.
      SETTLE_BATCH_WINDOW_MS: intBetween(0, 5_000)({ default: 50 }),
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
}

export type BillingConfig = ReturnType<typeof loadBillingConfig>;
