import { expect } from "vitest";
import { ledgerInvariants } from "../../services/billing/test/billing-harness.ts";
import { reconcile } from "../../services/billing/src/wallets/reconciliation.ts";
import { openBillingDb } from "../e2e/billing-db.ts";
import type { RunningSystem } from "../e2e/system.ts";
import { tally, type Outcome } from "./traffic.ts";

/**
 * What a client may see while a dependency fails: an answer, or a 503 in the OpenAI error shape
 * with `retry-after`. Never a 500, another 5xx, or a dropped connection.
 */
export function expectOnlySuccessOr503(outcomes: Outcome[]): void {
  const wrong = outcomes.filter(
    (o) => o.status !== 200 && !(o.status === 503 && o.retryAfter !== null && o.errorCode !== undefined),
  );
  expect(wrong.map((o) => `${o.what} ${o.status} ${o.errorCode ?? ""} retry-after=${o.retryAfter}`)).toEqual([]);
  expect(Object.keys(tally(outcomes)).length).toBeGreaterThan(0);
}

/**
 * Milliseconds from `since` until the service took requests of `kinds` again: the send time of
 * the first one sent after `since` that succeeded. Send times, not answer times: on a loaded
 * 2-core runner an answer can take a second or more, which is not downtime.
 */
export function recoveryMs(outcomes: Outcome[], since: number, kinds: Outcome["what"][]): number {
  const first = outcomes
    .filter((o) => kinds.includes(o.what) && o.sentAt >= since && o.status === 200 && o.whole !== false)
    .sort((a, b) => a.sentAt - b.sentAt)[0];
  return first ? first.sentAt - since : Infinity;
}

/** Samples each service's `/readyz` every 100 ms until stopped: when each was unready. */
export function watchReadiness(urls: Record<string, string>) {
  const samples: Array<{ at: number; service: string; ready: boolean }> = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      await Promise.all(
        Object.entries(urls).map(async ([service, url]) => {
          const ready = await fetch(url, { signal: AbortSignal.timeout(2_000) }).then(
            (res) => res.status === 200,
            () => false,
          );
          samples.push({ at: Date.now(), service, ready });
        }),
      );
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();
  return {
    samples,
    /** Whether every service was seen unready between `from` and `to`. */
    allUnreadyBetween(from: number, to: number): Record<string, boolean> {
      return Object.fromEntries(
        Object.keys(urls).map((service) => [
          service,
          samples.some((s) => s.service === service && s.at >= from && s.at <= to && !s.ready),
        ]),
      );
    },
    /** Milliseconds from `since` until every service answered ready again (Infinity if not yet). */
    readyAgainMs(since: number): number {
      let latest = since;
      for (const service of Object.keys(urls)) {
        const after = samples.filter((s) => s.service === service && s.at >= since);
        const lastUnready = after.filter((s) => !s.ready).at(-1);
        const firstReady = after.find((s) => s.ready && (!lastUnready || s.at > lastUnready.at));
        if (!firstReady) return Infinity;
        latest = Math.max(latest, firstReady.at);
      }
      return latest - since;
    },
    async stop() {
      running = false;
      await loop;
    },
  };
}

/**
 * Once quiet, money is conserved exactly: every answer a client received whole is a successful
 * usage record and no other request is, every ledger entry balances, and the starting grants
 * minus the charges are the posted balances.
 *
 * `cutByEdgeDeath` (default 0) is how many answers an edge's SIGKILL cut while they were in
 * flight. An answer's usage event is durable before its last bytes go, so an edge killed between
 * the two (the event acked or about to be, the `[DONE]` or the non-streamed body not yet written)
 * leaves a success record for an answer its client saw drop: up to that many success records may
 * then match no whole answer. Every whole answer must still have its record.
 */
export async function expectConservation(
  system: RunningSystem,
  outcomes: Outcome[],
  cutByEdgeDeath = 0,
): Promise<{ billedButCut: string[] }> {
  const db = await openBillingDb(system.databaseUrl);
  try {
    const completed = outcomes
      .filter((o) => (o.what === "chat" || o.what === "stream") && o.status === 200 && o.whole !== false)
      .map((o) => o.requestId!)
      .sort();
    const successes = async () =>
      (await db.query<{ request_id: string }>(`select request_id from usage_records where success`))
        .map((r) => r.request_id)
        .sort();
    let billedButCut: string[] = [];
    if (cutByEdgeDeath === 0) {
      await expect.poll(successes, { timeout: 20_000, interval: 250 }).toEqual(completed);
    } else {
      // Whole answers without their success record: none, once settlement caught up.
      const unbilled = async () => {
        const ids = new Set(await successes());
        return completed.filter((id) => !ids.has(id));
      };
      await expect.poll(unbilled, { timeout: 20_000, interval: 250 }).toEqual([]);
      const whole = new Set(completed);
      billedButCut = (await successes()).filter((id) => !whole.has(id));
      expect(billedButCut.length, `success records of no whole answer: ${billedButCut.join(", ")}`).toBeLessThanOrEqual(
        cutByEdgeDeath,
      );
    }
    expect(await ledgerInvariants(db)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
    // Each settled batch's legs are the sums of its records, each record's split exact, every
    // wallet its postings and its leases' holds.
    expect(await reconcile((sql) => db.query(sql))).toEqual([]);
    const granted = await db.figure(
      `select sum(p.amount_micros)::text as v from ledger_postings p join journal_entries e on e.id = p.entry_id
       where e.kind = 'grant' and p.ledger_account like 'customer:%'`,
    );
    const charged = await db.figure(`select sum(cost_micros)::text as v from usage_records`);
    const balances = await db.figure(`select sum(posted_micros)::text as v from wallets`);
    expect(granted - charged).toBe(balances);
    return { billedButCut };
  } finally {
    await db.close();
  }
}

/**
 * No hold and no slot outlives its deadline (docs/architecture.md#a-crashed-edge-costs-nobody):
 * billing releases every lease — its credit hold and the slots it counts — by its deadline +
 * EDGE_ISOLATION_MS (the edge session's deadline while open; the later of the lease's own and the
 * session's once fenced) or by its `release_at` when its edge reported it earlier (the report +
 * MAX_REQUEST_MS), give or take `slackMs` (one pass of the lease closer). A lease that fell due
 * while billing was down is due at `billingBackAt` at the earliest. Checks the leases released so
 * far and those still unreleased now; returns how late the latest release was.
 */
export async function expectNothingPastDeadline(
  databaseUrl: string,
  options: { isolationMs: number; slackMs: number; billingBackAt?: number },
): Promise<{ leases: number; unreleased: number; latestReleaseMs: number }> {
  const db = await openBillingDb(databaseUrl);
  try {
    const rows = await db.query<{
      id: string;
      status: string;
      held: string;
      slots: string;
      due: Date;
      released_at: Date | null;
      now: Date;
    }>(
      `select l.id, l.status, l.held_micros::text as held, l.released_at, clock_timestamp() as now,
         coalesce((select sum(a.admitted) from lease_allowances a where a.lease_id = l.id and a.resource = 'slots'), 0)::text
           as slots,
         least(l.release_at, greatest(coalesce(l.deadline, s.deadline), s.deadline) + $1 * interval '1 millisecond')
           as due
       from leases l join edge_sessions s on s.edge_id = l.edge_id`,
      [options.isolationMs],
    );
    const late: string[] = [];
    let latestReleaseMs = -Infinity;
    for (const row of rows) {
      const due = Math.max(row.due.getTime(), options.billingBackAt ?? -Infinity);
      const at = row.released_at?.getTime() ?? row.now.getTime();
      if (row.released_at) latestReleaseMs = Math.max(latestReleaseMs, at - due);
      if (at > due + options.slackMs) {
        late.push(
          `lease ${row.id} (${row.status}, held ${row.held} micro-USD, ${row.slots} slots) ` +
            `${row.released_at ? "released" : "still unreleased"} ${at - due} ms past its deadline`,
        );
      }
    }
    expect(late).toEqual([]);
    return { leases: rows.length, unreleased: rows.filter((r) => !r.released_at).length, latestReleaseMs };
  } finally {
    await db.close();
  }
}

/**
 * The leases of a fault test's system: the product's default TTL (heartbeats every second), a
 * MAX_REQUEST_MS small enough that every reported lease's release comes within the test (12 s:
 * the edges then cut an upstream call at 2 s, and answers here last well under a second), and an
 * EDGE_ISOLATION_MS that does the same for unreported ones yet is longer than any outage here,
 * so no edge ends its answers for being cut off from billing (test/faults/edge-isolation.test.ts
 * is about that). "Released by its deadline" is checked for all.
 */
export const FAULT_LEASES = { leaseTtlMs: 2_000, maxRequestMs: 12_000, isolationMs: 12_000, slackMs: 3_000 } as const;

/**
 * FAULT_LEASES as the services' environment (edge, accounts and billing share the TTL). The
 * edges return a lease idle for 2 TTL, not the default minute, so the checks that everything is
 * released once traffic stops need not wait a minute (test/e2e/idle-leases.test.ts checks what a
 * user is shown with the default).
 */
export const faultLeaseEnv = {
  /** Accounts' (the TTL of the edges' cached principals, which accounts sends them). */
  ttl: { PRINCIPAL_TTL_MS: String(FAULT_LEASES.leaseTtlMs) },
  // The lease settings are billing's, which the edges take from its replies.
  edge: {
    LEASE_IDLE_MS: String(2 * FAULT_LEASES.leaseTtlMs),
  },
  billing: {
    LEASE_TTL_MS: String(FAULT_LEASES.leaseTtlMs),
    MAX_REQUEST_MS: String(FAULT_LEASES.maxRequestMs),
    EDGE_ISOLATION_MS: String(FAULT_LEASES.isolationMs),
  },
};

/** Slots the unreleased leases count in flight now, as their edges last reported them. */
export async function slotsInUse(databaseUrl: string): Promise<bigint> {
  const db = await openBillingDb(databaseUrl);
  try {
    return await db.figure(
      `select sum(a.admitted)::text as v from lease_allowances a join leases l on l.id = a.lease_id
       where a.resource = 'slots' and l.released_at is null`,
    );
  } finally {
    await db.close();
  }
}

/** What expectNothingPastDeadline needs to know of the system's leases. */
export interface LeaseDeadlines {
  /** Billing's LEASE_TTL_MS (the edge's too). */
  leaseTtlMs: number;
  /** Billing's MAX_REQUEST_MS. */
  maxRequestMs: number;
  /** Billing's EDGE_ISOLATION_MS (the edge's too). */
  isolationMs: number;
  /** One pass of billing's lease closer (it runs every TTL) and a margin for a busy machine. */
  slackMs: number;
  /** When billing could write again after an outage of its own or of its database. */
  billingBackAt?: number;
}

/**
 * Once traffic has stopped, waits until every lease is released with nothing held (wallet holds,
 * slots in flight): idle leases go final after 2 TTL (faultLeaseEnv.edge's LEASE_IDLE_MS), and a
 * closed one is held MAX_REQUEST_MS more; one never reported, EDGE_ISOLATION_MS past its deadline.
 * Then checks none was released past its deadline (expectNothingPastDeadline). Returns how
 * long after `quietAt` the last was released, with expectNothingPastDeadline's figures.
 */
export async function expectAllReleased(databaseUrl: string, deadlines: LeaseDeadlines, quietAt: number) {
  const db = await openBillingDb(databaseUrl);
  try {
    await expect
      .poll(
        async () => ({
          unreleased: await db.figure(`select count(*)::text as v from leases where released_at is null`),
          held: await db.figure(`select sum(held_micros)::text as v from wallets`),
          slots: await slotsInUse(databaseUrl),
        }),
        {
          timeout:
            2 * deadlines.leaseTtlMs +
            Math.max(deadlines.maxRequestMs, deadlines.isolationMs) +
            deadlines.slackMs +
            5_000,
          interval: 250,
        },
      )
      .toEqual({ unreleased: 0n, held: 0n, slots: 0n });
  } finally {
    await db.close();
  }
  const releasedMs = Date.now() - quietAt;
  return { releasedMs, ...(await expectNothingPastDeadline(databaseUrl, deadlines)) };
}
