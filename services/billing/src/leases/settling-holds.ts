import { setTimeout as sleep } from "node:timers/promises";
import { max0 } from "@mkt/runtime/bigint-math";
import { AppError } from "@mkt/runtime/errors";
import type { Micros } from "@mkt/runtime/money";
import { billingDb } from "../billing-db.ts";
import type { BillingContext, Em } from "../context.ts";
import { int8 } from "../context.ts";
import type { AllowanceRow, LeaseRow, WalletRow } from "./lease-rows.ts";

/**
 * How much longer than one SETTLE_BATCH_WINDOW_MS a grant waits for settlement: an event that
 * arrives just after a batch began waits for the window to end, then for its own batch's commit.
 */
export const SETTLE_MARGIN_MS = 150;
/** How often a waiting grant looks at the account's held credit (one indexed read). */
const POLL_MS = 10;

/**
 * An insufficient_credits refusal that settlement may lift (docs/settlement.md#the-settlement-window):
 * the account is short by no more than what its leases still hold for requests admitted and not
 * yet settled, whose worst cases are released, and their costs charged, when their batch commits.
 * `heldMicros` is the wallet's held credit the refused grant read.
 */
export class ShortUntilSettled extends AppError {
  readonly heldMicros: Micros;

  constructor(refusal: AppError, heldMicros: Micros) {
    super(refusal.code, refusal.message, { headers: refusal.headers });
    this.heldMicros = heldMicros;
  }
}

/**
 * The refusal to throw when the account cannot cover `needed` with `coverable`: ShortUntilSettled
 * when the shortfall is within what the account's leases hold for admitted, unsettled requests
 * (admitted − settled credit: the lease in hand's from its rows in memory, which carry the
 * grant's report, the others' as committed), else `refusal` itself. Billing cannot tell a request
 * that ended from one still running, so the second kind counts too: a grant short by a request in
 * flight waits the same bounded time, then refuses.
 */
export async function refusalUnlessSettling(
  em: Em,
  lease: LeaseRow,
  credit: AllowanceRow | undefined,
  wallet: WalletRow,
  short: Micros,
  refusal: AppError,
): Promise<AppError> {
  const mine = max0((credit?.admitted ?? 0n) - lease.settledMicros);
  if (short <= mine) return new ShortUntilSettled(refusal, wallet.held);
  const db = await billingDb(em);
  const row = await db
    .selectFrom("leases as l")
    .innerJoin("lease_allowances as a", (join) =>
      join.onRef("a.lease_id", "=", "l.id").on("a.resource", "=", "credit").on("a.scope", "=", ""),
    )
    // A sum of bigints is a numeric, which the driver returns as text.
    .select((eb) =>
      eb.fn
        .sum<string | null>(eb.fn("greatest", [eb.lit(0), eb("a.admitted", "-", eb.ref("l.settled_micros"))]))
        .as("unsettled"),
    )
    .where("l.account_id", "=", lease.accountId)
    .where("l.id", "<>", lease.id)
    .where("l.released_at", "is", null)
    .executeTakeFirst();
  return short <= mine + int8(row?.unsettled) ? new ShortUntilSettled(refusal, wallet.held) : refusal;
}

/**
 * Runs `grant` and, while it refuses with ShortUntilSettled, waits for the account's held credit
 * to move (a batch settled some of its requests) and grants again, until one settlement window and
 * a margin have passed; then the last refusal stands. A client whose balance pays one request at a
 * time thus gets its next request once the last one settles, not a 402 meanwhile.
 */
export async function grantWaitingForSettlement<T>(
  ctx: BillingContext,
  accountId: string,
  grant: () => Promise<T>,
): Promise<T> {
  const deadline = performance.now() + ctx.config.SETTLE_BATCH_WINDOW_MS + SETTLE_MARGIN_MS;
  for (;;) {
    try {
      return await grant();
    } catch (err) {
      if (!(err instanceof ShortUntilSettled) || performance.now() >= deadline) throw err;
      await heldMoved(ctx, accountId, err.heldMicros, deadline);
    }
  }
}

/** Waits until the account's held credit differs from `held`, or until `deadline`. */
async function heldMoved(ctx: BillingContext, accountId: string, held: Micros, deadline: number): Promise<void> {
  const db = await billingDb(ctx.orm.em.fork());
  while (performance.now() < deadline) {
    await sleep(Math.min(POLL_MS, Math.max(0, deadline - performance.now())));
    const row = await db
      .selectFrom("wallets")
      .select("held_micros")
      .where("account_id", "=", accountId)
      .executeTakeFirst();
    if (int8(row?.held_micros) !== held) return;
  }
}
