import { max0 } from "@mkt/runtime/bigint-math";
import { AppError } from "@mkt/runtime/errors";
import type { Micros } from "@mkt/runtime/money";
import { billingDb, heldOfAllowance, prepare } from "../billing-db.ts";
import type { BillingContext, Em } from "../context.ts";
import { int8 } from "../context.ts";
import { keyWindow, neverResets, utcOffsetTime, type KeyWindow } from "../key-limits/key-windows.ts";
import { formatUsd } from "../wallets/ledger.ts";
import { addRoom, edgesUsing, sameTime, unspent } from "./lease-growth.ts";
import { growthFor } from "./lease-sizing.ts";
import type { KeyLimitRow, LeaseRow, WalletRow } from "./lease-rows.ts";
import { ShortUntilSettled } from "./settling-holds.ts";

const day = (at: Date) => at.toISOString().slice(0, 10);

/** The 402 of a key whose limit its window cannot cover: names the limit and when it resets. */
export function keyLimitExceeded(key: KeyLimitRow, window: KeyWindow): AppError {
  const per = key.reset === "daily" ? " per day" : key.reset === "weekly" ? " per week" : key.reset ? " per month" : "";
  const when = neverResets(window)
    ? "it does not reset (raise it with PATCH /v1/keys/{key_id})"
    : `it resets at ${utcOffsetTime(window.end)}`;
  return new AppError(
    "key_limit_exceeded",
    `This API key's spend limit of ${formatUsd(key.limitMicros)}${per} is reached for this request; ${when}.`,
  );
}

/**
 * Grows the lease's room for a spend-limited key (its budget nested in the lease,
 * docs/adr/0020-key-spend-limits-in-billing.md) by the sizing rule, `left` being the key's limit
 * less its settled spend in the window and what every lease holds of that window (granted − settled
 * while open or fenced, admitted − settled once closed, nothing once released). Wallet locked by
 * the caller, and every grant and settlement of the account's keys takes that lock, so the sum over
 * all leases never passes the limit. Returns the credit the request in hand may take: all of it, or
 * (a request without max_tokens, `minCredit` > 0) what the key has left when that covers the least
 * request; else refuses key_limit_exceeded and the caller's transaction rolls back.
 */
export async function growKeyRoom(
  ctx: BillingContext,
  em: Em,
  lease: LeaseRow,
  key: KeyLimitRow,
  wallet: WalletRow,
  need: { credit: Micros; minCredit: Micros; demandPerSecond: Micros },
  now: Date,
): Promise<Micros> {
  const window = keyWindow(key.reset, now);
  const mine = lease.allowances.find(
    (a) => a.scope === key.keyId && a.resource === "key_credit" && sameTime(a.windowStart, window.start),
  );
  const left = await keyRoomLeft(em, key, window);
  const coverable = max0(left + unspent(mine));
  let credit = need.credit;
  if (credit > coverable) {
    if (need.minCredit === 0n || need.minCredit > coverable) {
      const short = (need.minCredit || credit) - coverable;
      // Short only by the key's requests not yet settled: the grant waits for their batch, as an
      // account's does for its credit (settling-holds.ts): settling them lowers the wallet's hold too.
      const refusal = keyLimitExceeded(key, window);
      throw short <= (await keyUnsettled(em, lease, key, window, mine))
        ? new ShortUntilSettled(refusal, wallet.held)
        : refusal;
    }
    credit = coverable;
  }
  const ttlMs = ctx.config.LEASE_TTL_MS;
  const edges = await edgesUsing(em, lease, now, ttlMs);
  const add = growthFor({ left, edges, demandPerSecond: need.demandPerSecond, inHand: credit, ttlMs }, unspent(mine));
  if (add > 0n) await addRoom(em, lease, { scope: key.keyId, resource: "key_credit", span: window, add });
  return credit;
}

// The reads below are built and compiled once (prepare), bound per call (they run per grant of a
// spend-limited key); times are compared as the driver reads them (BillingDb): as ISO text.

const KEY_UNSETTLED = prepare((p: { keyId: string; windowStart: string; leaseId: string }, db) =>
  db
    .selectFrom("lease_allowances as a")
    .innerJoin("leases as l", "l.id", "a.lease_id")
    .select((eb) =>
      eb.fn
        .coalesce(
          eb.fn.sum<string>(eb.fn("greatest", [eb.lit(0), eb("a.admitted", "-", eb.ref("a.settled"))])),
          eb.lit(0),
        )
        .as("unsettled"),
    )
    .where("a.scope", "=", p.keyId)
    .where("a.resource", "=", "key_credit")
    .where("a.window_start", "=", p.windowStart)
    .where("l.released_at", "is", null)
    .where("l.id", "<>", p.leaseId),
);

/**
 * What the key's leases hold in the window for requests admitted and not yet settled (admitted −
 * settled): the lease in hand's from its row in memory, which carries the grant's report, the
 * others' as committed. Billing cannot tell a request that ended from one still running, so both
 * count: a grant short by one in flight waits the same bounded time, then refuses.
 */
async function keyUnsettled(
  em: Em,
  lease: LeaseRow,
  key: KeyLimitRow,
  window: KeyWindow,
  mine: { admitted: bigint; settled: bigint } | undefined,
): Promise<bigint> {
  const [row] = await KEY_UNSETTLED(await billingDb(em), {
    keyId: key.keyId,
    windowStart: window.start.toISOString(),
    leaseId: lease.id,
  });
  return max0((mine?.admitted ?? 0n) - (mine?.settled ?? 0n)) + int8(row?.unsettled);
}

const KEY_LEASED = prepare((p: { keyId: string; windowStart: string }, db) =>
  db
    .selectFrom("lease_allowances as a")
    .innerJoin("leases as l", "l.id", "a.lease_id")
    .select((eb) =>
      eb.fn
        .coalesce(
          eb.fn.sum<string>(eb.fn("greatest", [eb.lit(0), eb(heldOfAllowance(eb), "-", eb.ref("a.settled"))])),
          eb.lit(0),
        )
        .as("leased"),
    )
    .where("a.scope", "=", p.keyId)
    .where("a.resource", "=", "key_credit")
    .where("a.window_start", "=", p.windowStart)
    .where("l.released_at", "is", null),
);

/** What the key's limit leaves in the window: less settled spend and every lease's unsettled room. */
export async function keyRoomLeft(em: Em, key: KeyLimitRow, window: KeyWindow): Promise<bigint> {
  const [row] = await KEY_LEASED(await billingDb(em), { keyId: key.keyId, windowStart: window.start.toISOString() });
  return max0(key.limitMicros - (await spentInWindow(em, key.keyId, window)) - int8(row?.leased));
}

/** A window's days as 'YYYY-MM-DD', compared with the date column (from inclusive, to exclusive). */
const SPENT_IN_DAYS = prepare((p: { keyId: string; from: string; to: string }, db) =>
  db
    .selectFrom("key_daily_spend as k")
    .select((eb) => eb.fn.coalesce(eb.fn.sum<string>("k.spent_micros"), eb.lit(0)).as("spent"))
    .where("k.key_id", "=", p.keyId)
    .where("k.day", ">=", p.from)
    .where("k.day", "<", p.to),
);

/** Settled spend of the key in the window (the sum of its days). */
export async function spentInWindow(em: Em, keyId: string, window: KeyWindow): Promise<bigint> {
  const [row] = await SPENT_IN_DAYS(await billingDb(em), { keyId, from: day(window.start), to: day(window.end) });
  return int8(row?.spent);
}
