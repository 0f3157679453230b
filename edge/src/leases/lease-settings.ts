import type { Logger } from "@mkt/runtime/logger";
import { upstreamTotalMs } from "@mkt/runtime/request-bounds";
import type { LeaseSettings } from "@mkt/proto/billing/v1/leases";

/**
 * Billing's defaults: the pace of the edge's calls before billing's first reply (nothing is
 * admitted before one: every lease comes in a reply), and what a reply without settings means.
 */
export const BILLING_DEFAULTS = { leaseTtlMs: 2_000, edgeIsolationMs: 60_000, maxRequestMs: 630_000 } as const;

/** The settings as numbers, as the edge compares and logs them. */
export interface LeaseBounds {
  leaseTtlMs: number;
  edgeIsolationMs: number;
  maxRequestMs: number;
}

/**
 * Billing's lease settings as this edge runs by them (docs/leases.md#settings). Billing owns
 * LEASE_TTL_MS, EDGE_ISOLATION_MS and MAX_REQUEST_MS and sends them in every lease reply; the edge
 * configures none of them.
 *
 * - The TTL is the latest reply's: it paces heartbeats and margins, which must follow billing's
 *   sessions as they are now.
 * - The isolation and request bounds only ever go down while the process runs. Billing closes each
 *   lease by the bounds it was granted under, so the edge's must never exceed the bounds of any
 *   lease it may still admit on: a billing restarted with longer ones leaves its edges on the
 *   shorter ones until they restart (cutting answers sooner than needed, never later).
 */
export class BillingLeaseSettings {
  #ttlMs: number;
  #isolationMs = Infinity;
  #maxRequestMs = Infinity;
  readonly #upstreamTotalTimeoutMs: number;
  readonly #log: Logger | undefined;
  #first: ((bounds: LeaseBounds) => void) | undefined;
  /** Billing's settings as its first reply gave them. */
  readonly first: Promise<LeaseBounds>;
  readonly #listeners: Array<() => void> = [];
  /** The longer settings last warned about (once per value, not per reply). */
  #warnedLonger = "";

  constructor(options: { initialTtlMs?: number; upstreamTotalTimeoutMs?: number; log?: Logger } = {}) {
    this.#ttlMs = options.initialTtlMs ?? BILLING_DEFAULTS.leaseTtlMs;
    this.#upstreamTotalTimeoutMs = options.upstreamTotalTimeoutMs ?? Infinity;
    this.#log = options.log;
    this.first = new Promise((resolve) => (this.#first = resolve));
  }

  /** Billing's LEASE_TTL_MS as its latest reply said (its default before any). */
  get ttlMs(): number {
    return this.#ttlMs;
  }

  /** Validity is cut this much short of billing's, for the time a reply spent on the way. */
  get marginMs(): number {
    return Math.max(10, Math.floor(this.#ttlMs / 10));
  }

  /** The edge's bound on running cut off from billing (Infinity before any reply: nothing runs). */
  get isolationMs(): number {
    return this.#isolationMs;
  }

  get maxRequestMs(): number {
    return this.#maxRequestMs;
  }

  /** The longest an upstream call may run: UPSTREAM_TOTAL_TIMEOUT_MS within MAX_REQUEST_MS − 10 s. */
  upstreamTotalMs(): number {
    return upstreamTotalMs(this.#upstreamTotalTimeoutMs, this.#maxRequestMs);
  }

  /** Called after each change of the bounds (the isolation watch re-arms). */
  onChange(listener: () => void): void {
    this.#listeners.push(listener);
  }

  /** A lease reply's settings (a reply without them came from a billing that had its defaults). */
  apply(settings: LeaseSettings | undefined): void {
    const told: LeaseBounds = settings
      ? {
          leaseTtlMs: Number(settings.leaseTtlMs),
          edgeIsolationMs: Number(settings.edgeIsolationMs),
          maxRequestMs: Number(settings.maxRequestMs),
        }
      : { ...BILLING_DEFAULTS };
    const first = this.#first;
    this.#first = undefined;
    const before = { ttl: this.#ttlMs, isolation: this.#isolationMs, maxRequest: this.#maxRequestMs };
    this.#ttlMs = told.leaseTtlMs;
    this.#isolationMs = Math.min(this.#isolationMs, told.edgeIsolationMs);
    this.#maxRequestMs = Math.min(this.#maxRequestMs, told.maxRequestMs);
    const changed =
      before.ttl !== this.#ttlMs || before.isolation !== this.#isolationMs || before.maxRequest !== this.#maxRequestMs;
    if (changed || first) this.#report(first !== undefined, before.maxRequest !== this.#maxRequestMs);
    const longer = told.edgeIsolationMs > this.#isolationMs || told.maxRequestMs > this.#maxRequestMs;
    if (longer && this.#warnedLonger !== `${told.edgeIsolationMs}/${told.maxRequestMs}`) {
      this.#warnedLonger = `${told.edgeIsolationMs}/${told.maxRequestMs}`;
      this.#log?.warn(
        { told, isolationMs: this.#isolationMs, maxRequestMs: this.#maxRequestMs },
        "billing's EDGE_ISOLATION_MS or MAX_REQUEST_MS is longer than this edge's: it keeps the shorter until it restarts",
      );
    }
    if (changed) for (const listener of this.#listeners) listener();
    first?.(told);
  }

  #report(first: boolean, maxRequestChanged: boolean): void {
    const upstreamMs = this.upstreamTotalMs();
    const clamped = upstreamMs < this.#upstreamTotalTimeoutMs;
    this.#log?.info(
      {
        leaseTtlMs: this.#ttlMs,
        edgeIsolationMs: this.#isolationMs,
        maxRequestMs: this.#maxRequestMs,
        ...(clamped ? { upstreamTotalMs: upstreamMs, upstreamTotalTimeoutMs: this.#upstreamTotalTimeoutMs } : {}),
      },
      first ? "billing's lease settings" : "billing's lease settings changed",
    );
    if (clamped && maxRequestChanged) {
      this.#log?.warn(
        {
          upstreamTotalMs: upstreamMs,
          upstreamTotalTimeoutMs: this.#upstreamTotalTimeoutMs,
          maxRequestMs: this.#maxRequestMs,
        },
        "UPSTREAM_TOTAL_TIMEOUT_MS clamped to billing's MAX_REQUEST_MS − 10 s",
      );
    }
  }
}

const NAMES: Record<keyof LeaseBounds, string> = {
  leaseTtlMs: "LEASE_TTL_MS",
  edgeIsolationMs: "EDGE_ISOLATION_MS",
  maxRequestMs: "MAX_REQUEST_MS",
};

/**
 * The settings an edge's environment still sets that differ from billing's (its first reply):
 * each line names both values. Empty when they agree or the environment sets none.
 */
export function disagreements(ownSettings: Partial<LeaseBounds>, billing: LeaseBounds): string[] {
  return (Object.keys(NAMES) as Array<keyof LeaseBounds>)
    .filter((name) => ownSettings[name] !== undefined && ownSettings[name] !== billing[name])
    .map(
      (name) =>
        `${NAMES[name]}: this edge's environment sets ${ownSettings[name]}, billing's is ${billing[name]}; billing owns it and sends it to the edges: remove it from the edge's environment`,
    );
}
