import type { Em } from "../context.ts";
import { write, writeRow } from "../write-batch.ts";
import { creditOf, type AllowanceRow, type LeaseRow, type WalletRow } from "./lease-rows.ts";
import { LEASE_WRITES, setGranted, shiftHold } from "./lease-writes.ts";

/**
 * Closes a lease on the edge's final report: billing now holds admitted − settled until
 * `MAX_REQUEST_MS` (the lease's own, else `maxRequestMs`) after the last moment a request could have been admitted on it (the report, or
 * the deadline it was fenced at if that came first: the requests admitted may still be running),
 * and the request room the edge did not use goes back to its window while that window is current.
 * A report that comes after that (the edge could not reach billing, or billing its database, for
 * longer) releases it at once: every request admitted on it has ended.
 */
export async function closeReported(
  em: Em,
  lease: LeaseRow,
  wallet: WalletRow,
  now: Date,
  maxRequestMs: number,
): Promise<void> {
  const admittedUntil = lease.deadline && lease.deadline < now ? lease.deadline : now;
  const releaseAt = new Date(admittedUntil.getTime() + (lease.maxRequestMs ?? maxRequestMs));
  const ended = releaseAt <= now;
  const admitted = creditOf(lease)?.admitted ?? 0n;
  const keep = !ended && admitted > lease.settledMicros ? admitted - lease.settledMicros : 0n;
  await shiftHold(em, lease, wallet, keep - lease.heldMicros);
  for (const a of lease.allowances) {
    if (a.resource === "credit" || a.granted === a.admitted || !a.windowEnd || a.windowEnd <= now) continue;
    await uncount(em, lease, a, a.granted - a.admitted);
  }
  lease.status = "closed";
  // Released at once only when it holds nothing at all: no credit, and no slot or included token
  // of a request still running (a closed lease's slots count its requests in flight until it is
  // released; releasing it at once would let another edge take them while they run).
  const inUse = lease.allowances.some(
    (a) => (a.resource === "slots" && a.admitted > 0n) || (a.resource === "included_tokens" && a.admitted > a.settled),
  );
  // lease.heldMicros is the row's (read under the wallet's lock, shifted above).
  const release = ended || (lease.heldMicros === 0n && !inUse);
  await writeRow(em, LEASE_WRITES.lease, [lease.id, null, null, 0n, now, releaseAt, release ? now : null]);
}

/**
 * After a budget's recall ack (its edge dropped the budget and reported what it admitted): the
 * room the edge did not use goes back — slots beyond its requests in flight, and plan requests and
 * tokens of windows not yet ended to their counters — so another edge's grant can take it.
 * Nothing more is admitted on a dropped budget, so its granted totals shrink to its admitted.
 */
export async function returnBudgetRoom(em: Em, lease: LeaseRow, subscriptionId: string, now: Date): Promise<void> {
  for (const a of lease.allowances) {
    if (a.scope !== subscriptionId || a.granted <= a.admitted) continue;
    if (a.resource === "sub_requests_minute" || a.resource === "sub_tokens_minute") {
      if (!a.windowEnd || a.windowEnd <= now) continue;
      await uncount(em, lease, a, a.granted - a.admitted);
    } else if (a.resource !== "slots" && a.resource !== "included_tokens") continue;
    await setGranted(em, a, a.admitted);
  }
}

/** Gives `n` unused units of a window's room back to the counter it was counted in at grant. */
async function uncount(em: Em, lease: LeaseRow, a: AllowanceRow, n: bigint): Promise<void> {
  if (a.resource === "requests_minute" || a.resource === "requests_day") {
    await write(
      em,
      `update rate_counters set count = count - ? where account_id = ? and "window" = ? and window_start = ?`,
      [n, lease.accountId, a.resource === "requests_day" ? "day" : "minute", a.windowStart],
    );
  } else if (a.resource === "sub_requests_minute" || a.resource === "sub_tokens_minute") {
    const column = a.resource === "sub_requests_minute" ? "requests" : "tokens";
    await write(
      em,
      `update subscription_rate_counters set ${column} = ${column} - ? where subscription_id = ? and window_start = ?`,
      [n, a.scope, a.windowStart],
    );
  }
  // Included tokens and slots are not counters: what a lease holds of them is read from its rows.
}
