import { AppError } from "@mkt/runtime/errors";
import { isUuid, newId } from "@mkt/runtime/ids";
import type { AddCreditsRequest, AddCreditsResponse } from "@mkt/proto/billing/v1/billing";
import { int8, type BillingContext } from "../context.ts";
import { unspentRoom } from "../leases/unspent-room.ts";
import { formatUsd, ledgerAccounts, lockWallet, openWallet, postEntry } from "./ledger.ts";

/** The largest single top-up: a typo of a few zeros should not mint a fortune. */
export const MAX_TOP_UP_MICROS = 1_000_000n * 1_000_000n; // 1,000,000 USD

/**
 * An operator top-up: one balanced entry (platform:top_ups → customer) and the wallet's posted
 * balance, in one transaction. The entry is referenced by account and idempotency key, so a
 * retry finds the first call's entry and credits nothing; the same key with another amount is a
 * client bug and is refused rather than guessed at.
 */
export async function addCredits(ctx: BillingContext, req: AddCreditsRequest): Promise<AddCreditsResponse> {
  if (!isUuid(req.accountId))
    throw new AppError("invalid_request", "account_id must be a UUID", { param: "account_id" });
  if (req.amountMicros <= 0n || req.amountMicros > MAX_TOP_UP_MICROS) {
    throw new AppError("invalid_request", `amount must be more than 0 and at most ${formatUsd(MAX_TOP_UP_MICROS)}.`, {
      param: "amount_usd",
    });
  }
  if (req.idempotencyKey.length > 255) {
    throw new AppError("invalid_request", "Idempotency-Key must be at most 255 characters.", {
      param: "idempotency_key",
    });
  }
  const reference = `${req.accountId}:${req.idempotencyKey || newId()}`;

  return ctx.orm.em.fork().transactional(async (em) => {
    await openWallet(em, req.accountId, ctx.config.STARTING_CREDIT_USD);
    // Locking the wallet first serializes concurrent retries of one key behind each other.
    await lockWallet(em, req.accountId);
    const posted = await postEntry(em, "top_up", reference, [
      [ledgerAccounts.topUps, -req.amountMicros],
      [ledgerAccounts.customer(req.accountId), req.amountMicros],
    ]);
    if (posted) {
      await em.execute(`update wallets set posted_micros = posted_micros + ? where account_id = ?`, [
        req.amountMicros,
        req.accountId,
      ]);
    } else {
      const [first] = await em.execute(
        `select p.amount_micros from journal_entries e join ledger_postings p on p.entry_id = e.id
         where e.kind = 'top_up' and e.reference = ? and p.ledger_account = ?`,
        [reference, ledgerAccounts.customer(req.accountId)],
      );
      if (int8(first?.amount_micros) !== req.amountMicros) {
        throw new AppError(
          "idempotency_conflict",
          "This Idempotency-Key was already used for a top-up of another amount.",
          { param: "Idempotency-Key" },
        );
      }
    }
    const wallet = await lockWallet(em, req.accountId);
    // The balance as GetBalance shows it: room the leases hold ahead of demand is not spent (an
    // idle lease keeps one request's worth for LEASE_IDLE_MS).
    const unspent = await unspentRoom(em, req.accountId, ctx.clock());
    return { creditBalanceMicros: wallet.posted - wallet.held + unspent.credit, replayed: !posted };
  });
}
