import { AppError } from "@mkt/runtime/errors";
import type { InHand } from "./admission-need.ts";
import type { GrantCoalescer } from "./grant-coalescer.ts";
import type { HeldLease } from "./held-lease.ts";
import type { Attempt, Ticket } from "./lease-admission.ts";
import { unavailable } from "./lease-errors.ts";
import { isRefusal, type RefusalCache } from "./refusal-cache.ts";
import type { ScopeKey } from "./scope-key.ts";

/** What a grant's reply tells the requests it was for, besides the lease it brings. */
export interface GrantAnswer {
  /** Billing let the request cross its `subscription` plan's included-token line. */
  includedCrossing: boolean;
}

/**
 * Retries of the cold path for one request before it gives up with a 503: others took each
 * grant's room, or the grant came back after the lease's validity (a slow billing).
 */
export const MAX_GRANTS_PER_REQUEST = 8;

/** What the cold path reads and calls, owned by the lease table. */
export interface ColdPath {
  ttlMs: number;
  now(): number;
  inUse(accountId: string): HeldLease | undefined;
  /** The heartbeat on the way, until its reply is applied. */
  beating(): Promise<void> | undefined;
  refusals: RefusalCache;
  /**
   * Whether a call ended on one of the account's retired leases since that lease's last report:
   * billing still counts its slot, and the grant reports it first (lease-table.ts).
   */
  slotsEndedUnreported(accountId: string): boolean;
  grants: GrantCoalescer<GrantAnswer>;
  /** One GrantLease for `members` requests of the scope, `inHand` their sum. */
  grant(key: ScopeKey, tier: string, inHand: InHand, members: number): Promise<GrantAnswer>;
}

/**
 * Admits a request of `key` by `attempt` on its lease in memory, and when the lease is short asks
 * billing, at most MAX_GRANTS_PER_REQUEST times, through the scope's shared grant. `attempt` gets
 * `crossing`: this request's own last grant let it cross its included-token line.
 */
export async function admitOrGrant(
  path: ColdPath,
  key: ScopeKey,
  tier: string,
  inHand: InHand,
  attempt: (crossing: boolean) => Attempt<Ticket>,
): Promise<Ticket> {
  let crossing = false;
  // A request that may shrink to what the account has (min_credit) asks alone: its grant's
  // cover is computed for it. So does one whose shared grant was refused (below).
  let alone = inHand.minCredit > 0n;
  let waitedForBeat = false;
  for (let grants = 0; ;) {
    const tried = attempt(crossing);
    if ("ok" in tried) return tried.ok;
    if ("waitMs" in tried) {
      await new Promise((resolve) => setTimeout(resolve, tried.waitMs));
      continue;
    }
    // A lease that lapsed while a heartbeat is on the way: that beat's reply renews it (or says
    // it was fenced) at no cost, so the request waits for it, once, rather than ask for a grant.
    // Under load a busy billing answers beats late and leases lapse until the reply; a grant
    // per request in those gaps kept billing busy enough that the gaps never closed.
    const lapsed = path.inUse(key.accountId);
    const beating = path.beating();
    if (!waitedForBeat && beating && lapsed?.open && path.now() >= lapsed.validUntil) {
      waitedForBeat = true;
      await beating;
      continue;
    }
    // A refusal cached from billing spares it a call, never room the lease still has. A refusal
    // for the plan's slots is not repeated once a call ended on a retired lease since billing last
    // heard of it: that call may hold the slot billing counted, and the grant reports its end first.
    const refusal = path.refusals.refusing(key, inHand, path.now());
    const slotFreed = refusal?.code === "concurrency_limit_exceeded" && path.slotsEndedUnreported(key.accountId);
    if (refusal && !slotFreed) throw refusal;
    if (grants >= MAX_GRANTS_PER_REQUEST) throw unavailable(path.ttlMs, "The account's lease is contended");
    const step = path.grants.next(key, inHand, alone, (all, members) => path.grant(key, tier, all, members));
    if ("wait" in step) {
      await step.wait;
      continue;
    }
    grants += 1;
    const { batch } = step;
    let granted;
    try {
      granted = await batch.done;
    } catch (err) {
      // A grant for several requests refused says nothing of each alone (the account may pay
      // some of them): each asks billing again for itself, as a request without a batch does.
      if (batch.members > 1 && err instanceof AppError && isRefusal(err)) {
        alone = true;
        continue;
      }
      throw err;
    }
    // Only the request a grant was made for alone may cross its included-token line: one that
    // shared it (or waited on another's, above) asks for its own when it is short.
    crossing = batch.members === 1 && granted.includedCrossing;
    if (granted.includedCrossing && batch.members > 1) alone = true;
  }
}
