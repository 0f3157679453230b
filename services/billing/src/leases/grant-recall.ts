import { performance } from "node:perf_hooks";
import type { GrantLeaseRequest } from "@mkt/proto/billing/v1/leases";
import { billingDb } from "../billing-db.ts";
import { int8, type BillingContext, type Em } from "../context.ts";
import { tierLimits } from "../rate-limits/rate-limiter.ts";
import { withDeadlockRetry } from "./deadlock-retry.ts";
import { fenceLeases } from "./fence-leases.ts";
import { counted, sameTime, unspent } from "./lease-growth.ts";
import type { LeaseRow } from "./lease-rows.ts";
import { loadLeases } from "./lease-store.ts";
import { amountsOf } from "./lease-validation.ts";
import { REQUEST_WINDOWS, windowsOf } from "./lease-windows.ts";
import { keyWindow } from "../key-limits/key-windows.ts";
import { keyRoomLeft } from "./key-room.ts";

/**
 * How long GrantLease waits at most for recalled room before it refuses
 * (docs/leases.md#how-much-room-an-edge-gets).
 */
export const GRANT_RECALL_WAIT_MS = 50;

/**
 * GrantLease's bounded recall (docs/leases.md#how-much-room-an-edge-gets), run after the grant was
 * refused 402/429: when other edges' unreported room on the account (granted − admitted as they
 * last reported it) together with what is free could cover the request in hand, those edges' leases
 * are fenced and recalled, waiting at most 50 ms for their acks, whose final totals release what
 * they did not use. Returns whether the caller should grant once more: something was recalled, or,
 * for a refusal for credit, nothing is short any more (a settlement released credit between the
 * refusal and this look, which the refusal must not outlive; a 429 may be a subscription's, which
 * the budgets' recall judges). When the unreported room could not cover the request nothing is
 * fenced: a client with no credit gets its 402 at once and never takes other edges' leases away.
 */
export async function recallForGrant(ctx: BillingContext, req: GrantLeaseRequest, refusal: string): Promise<boolean> {
  const holders = await withDeadlockRetry(() =>
    ctx.orm.em.fork().transactional(async (em) => {
      // FOR UPDATE on the wallet first (fenceLeases takes it again, harmlessly): no grant or
      // heartbeat of the account changes its leases between the reading and the fence.
      const db = await billingDb(em);
      await db
        .selectFrom("wallets as w")
        .select("w.account_id")
        .where("w.account_id", "=", req.accountId)
        .forUpdate()
        .execute();
      const taken = await roomToTake(ctx, em, req);
      if (taken === "covered") return taken;
      return taken.length > 0 ? fenceLeases(em, req.accountId, taken) : [];
    }),
  );
  if (holders === "covered") return refusal !== "rate_limit_exceeded";
  if (holders.length === 0) return false;
  await ctx.recallLeases(holders, "", performance.now() + GRANT_RECALL_WAIT_MS);
  return true;
}

/**
 * The other edges' open leases whose unreported room is needed, none when even all of it could
 * not cover the request in hand in every account resource it is short of, or "covered" when no
 * resource is short any more.
 */
async function roomToTake(ctx: BillingContext, em: Em, req: GrantLeaseRequest): Promise<string[] | "covered"> {
  const now = ctx.clock();
  const want = amountsOf(req.request);
  const leases = await loadLeases(em, (l) =>
    l.and([l("l.account_id", "=", req.accountId), l("l.status", "=", "open")]),
  );
  const mine = leases.find((l) => l.edgeId === req.edgeId);
  const others = leases.filter((l) => l.edgeId !== req.edgeId);
  const db = await billingDb(em);
  const wallet = await db
    .selectFrom("wallets as w")
    .select(["w.posted_micros", "w.held_micros"])
    .where("w.account_id", "=", req.accountId)
    .executeTakeFirst();
  if (!wallet) return [];
  // Per resource: what is short for the request in hand, and each other lease's unspent room.
  const shortfalls: Array<{ short: bigint; roomOf: (lease: LeaseRow) => bigint }> = [];
  const credit = (lease: LeaseRow | undefined) => unspent(lease?.allowances.find((a) => a.resource === "credit"));
  const free = int8(wallet.posted_micros) - int8(wallet.held_micros);
  shortfalls.push({ short: want.credit - free - credit(mine), roomOf: credit });
  const limits = tierLimits(ctx.config.TIERS, req.tier);
  for (const window of REQUEST_WINDOWS) {
    const { current } = windowsOf(window, now, ctx.config.LEASE_TTL_MS);
    const limit = window.counter === "minute" ? limits.limitPerMinute : limits.limitPerDay;
    const room = (lease: LeaseRow | undefined) =>
      unspent(
        lease?.allowances.find(
          (a) => a.scope === "" && a.resource === window.resource && sameTime(a.windowStart, current.start),
        ),
      );
    const left = limit - (await counted(em, req.accountId, window.counter, current.start));
    shortfalls.push({ short: want.requests - left - room(mine), roomOf: room });
  }
  // A spend-limited key's room in its window, which other edges may hold unused too.
  // Every lease of the account lists the same limited keys (loadLeases reads them per account).
  const key = leases[0]?.keyLimits.find((k) => k.keyId === req.request?.keyId);
  if (key && want.credit > 0n) {
    const window = keyWindow(key.reset, now);
    const room = (lease: LeaseRow | undefined) =>
      unspent(
        lease?.allowances.find(
          (a) => a.scope === key.keyId && a.resource === "key_credit" && sameTime(a.windowStart, window.start),
        ),
      );
    shortfalls.push({ short: want.credit - (await keyRoomLeft(em, key, window)) - room(mine), roomOf: room });
  }
  if (shortfalls.every(({ short }) => short <= 0n)) return "covered";
  const taken = new Set<string>();
  for (const { short, roomOf } of shortfalls) {
    if (short <= 0n) continue;
    const holding = others.filter((l) => roomOf(l) > 0n);
    if (holding.reduce((sum, l) => sum + roomOf(l), 0n) < short) return [];
    for (const lease of holding) taken.add(lease.id);
  }
  return [...taken];
}
