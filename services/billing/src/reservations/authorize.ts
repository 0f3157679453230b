import { isUuid, newId } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import {
  executeStatement,
  pipelinedTransaction,
  type Pipeline,
  type Row,
  type Statement,
} from "@mkt/runtime/pipelined-transaction";
import { affordableOutputTokens, costMicros } from "@mkt/runtime/money";
import type { AuthorizeRequest, AuthorizeResponse } from "@mkt/proto/billing/v1/billing";
import { int8, type BillingContext } from "../context.ts";
import {
  checkRequestLimits,
  counterUpsert,
  countsBefore,
  tierLimits,
  uncountStatement,
} from "../rate-limits/rate-limiter.ts";
import { authorizePlanRequest } from "../subscriptions/plan-authorize.ts";
import { openWallet } from "../wallets/ledger.ts";
import {
  alreadyAuthorized,
  checkContext,
  choicesOf,
  insufficientCredits,
  MAX_CHOICES,
  reservationInsert,
} from "./reservation-hold.ts";

export const PROVIDERS = ["local", "hoster", "cloud"] as const;

/** Refuses requests the caller (edge, via registry's route) should never send. */
function validate(req: AuthorizeRequest): void {
  const bad = (field: string, why: string) => new AppError("invalid_request", `${field} ${why}`, { param: field });
  if (!req.requestId || req.requestId.length > 200) throw bad("request_id", "must be 1 to 200 characters");
  if (!isUuid(req.accountId)) throw bad("account_id", "must be a UUID");
  if (!req.modelId) throw bad("model_id", "is required");
  if (!(PROVIDERS as readonly string[]).includes(req.provider)) throw bad("provider", "must be local, hoster or cloud");
  if (req.provider === "hoster" && !req.hosterId) throw bad("hoster_id", "is required for hoster models");
  if (req.inputPricePer1mMicros < 0n || req.outputPricePer1mMicros < 0n) throw bad("price", "must not be negative");
  if (req.contextWindow <= 0n) throw bad("context_window", "must be positive");
  if (req.maxOutputTokensCap <= 0n) throw bad("max_output_tokens_cap", "must be positive");
  if (req.inputTokens < 0n) throw bad("input_tokens", "must not be negative");
  if (req.requestedMaxOutputTokens < 0n) throw bad("max_tokens", "must not be negative");
  if (req.choices < 0n || req.choices > MAX_CHOICES) throw bad("n", `must be from 1 to ${MAX_CHOICES}`);
}

const minBig = (...values: bigint[]) => values.reduce((a, b) => (b < a ? b : a));

/** What Authorize answers for one request of a batch: its grant, or why it was refused. */
export type AuthorizeOutcome = AuthorizeResponse | AppError;

/**
 * The hot-path step (DESIGN.md §2) for one request: a scoped key's subscription state and plan
 * limits, rate limits, output cap and a hold of the worst-case cost, in one transaction. Any
 * refusal throws and leaves nothing behind.
 */
export async function authorize(ctx: BillingContext, req: AuthorizeRequest): Promise<AuthorizeResponse> {
  const [outcome] = await authorizeBatch(ctx, [req]);
  if (outcome instanceof AppError) throw outcome;
  return outcome!;
}

/**
 * Authorizes a batch of requests, answering each as if it had been authorized alone, in request
 * order. Requests on a scoped key each run their plan's transaction; all others share one
 * transaction of two round trips whatever the batch size (BEGIN with the statement that counts
 * the rate windows and locks the wallets, then the one that takes back refused requests' counts
 * and inserts the reservations with their holds, with COMMIT; a wallet is opened first for an
 * account not seen before): under load the edge sends what arrived during its previous call, so
 * one commit serves dozens of requests. A part that fails answers its own requests with the
 * error; the others keep their answers.
 */
export async function authorizeBatch(
  ctx: BillingContext,
  requests: readonly AuthorizeRequest[],
): Promise<AuthorizeOutcome[]> {
  const outcomes: Array<AuthorizeOutcome | undefined> = new Array(requests.length);
  const now = ctx.clock();
  const shared: number[] = [];
  const plans: number[] = [];
  const seen = new Set<string>();
  requests.forEach((req, i) => {
    try {
      validate(req);
      if (seen.has(req.requestId)) throw alreadyAuthorized();
      seen.add(req.requestId);
      if (req.subscriptionId !== "") {
        plans.push(i);
        return;
      }
      // Context checks need no database, so they run first: a request refused here costs no
      // round trip and, like every refusal, is not counted against the rate limits.
      checkContext(req);
      shared.push(i);
    } catch (err) {
      outcomes[i] = asOutcome(err);
    }
  });
  await Promise.all([
    // A scoped key's request is priced and limited by its subscription's plan, read in its own
    // transaction (the subscription row lock serializes the subscriber's Authorize calls).
    ...plans.map(async (i) => {
      const req = requests[i]!;
      const limits = tierLimits(ctx.config.TIERS, req.tier);
      outcomes[i] = await ctx.orm.em
        .fork()
        .transactional((em) => authorizePlanRequest(ctx, em, req, limits, now))
        .catch((err: unknown) => failure(ctx, err));
    }),
    shared.length === 0
      ? undefined
      : authorizeShared(
          ctx,
          shared.map((i) => requests[i]!),
          now,
        ).then(
          (results) => results.forEach((outcome, k) => (outcomes[shared[k]!] = outcome)),
          // Rolled back: nothing is held for these, and the other parts' answers still stand
          // (a failed call would hide grants already committed, leaving their holds to expiry).
          (err: unknown) => {
            const refusal = failure(ctx, err);
            for (const i of shared) outcomes[i] = refusal;
          },
        ),
  ]);
  return outcomes as AuthorizeOutcome[];
}

interface Admitted {
  index: number;
  reservationId: string;
  hold: { maxOutput: bigint; reserved: bigint; inputPricePer1m: bigint; outputPricePer1m: bigint };
  grant: AuthorizeResponse;
}

/** The requests without a subscription, in one transaction; accounts locked in ascending order. */
async function authorizeShared(
  ctx: BillingContext,
  requests: AuthorizeRequest[],
  now: Date,
): Promise<AuthorizeOutcome[]> {
  const order = requests.map((_, i) => i).sort((a, b) => compare(requests[a]!.accountId, requests[b]!.accountId));
  const perAccount = new Map<string, number>();
  for (const i of order) perAccount.set(requests[i]!.accountId, (perAccount.get(requests[i]!.accountId) ?? 0) + 1);
  await openWallets(ctx, [...perAccount.keys()]);
  const { outcomes, retried } = await withDeadlockRetry(() =>
    pipelinedTransaction(ctx.orm, async (tx) => {
      const [locked] = await tx.first(countAndLockWallets(perAccount, now));
      return admit(ctx, tx, requests, order, perAccount, locked!, now);
    }),
  );
  // A request id authorized by an earlier call is refused only by the insert, after the commit:
  // its count is taken back on its own (a retried request id; the edge never sends one).
  if (retried.size > 0) {
    await executeStatement(ctx.orm.em.fork(), uncountStatement(retried, now));
  }
  return outcomes;
}

/**
 * Opens the wallets of accounts not known to have one, in a transaction of their own (opening is
 * idempotent: ON CONFLICT DO NOTHING, and the grant is once per account).
 */
async function openWallets(ctx: BillingContext, accounts: readonly string[]): Promise<void> {
  const unseen = accounts.filter((id) => !ctx.openWallets.has(id));
  if (unseen.length === 0) return;
  await ctx.orm.em.fork().transactional(async (em) => {
    for (const id of unseen) await openWallet(em, id, ctx.config.STARTING_CREDIT_USD);
  });
  // Committed: these accounts' wallets exist from now on.
  if (ctx.openWallets.size >= 100_000) ctx.openWallets.clear();
  for (const id of unseen) ctx.openWallets.add(id);
}

/**
 * Each request as if alone, in account order, against the counts and balances just locked: a
 * refused one is not counted and holds nothing, so the requests after it see the counts and the
 * balance it left. Ends the transaction with the refusals' uncount and the reservations' insert.
 */
async function admit(
  ctx: BillingContext,
  tx: Pipeline,
  requests: AuthorizeRequest[],
  order: number[],
  perAccount: ReadonlyMap<string, number>,
  locked: Row[],
  now: Date,
): Promise<{ outcomes: AuthorizeOutcome[]; retried: Map<string, number> }> {
  const outcomes: AuthorizeOutcome[] = new Array(requests.length);
  const { counts, wallets } = readCountsAndWallets(perAccount, locked);
  const admitted: Admitted[] = [];
  const refused = new Map<string, number>();
  for (const i of order) {
    const req = requests[i]!;
    const count = counts.get(req.accountId)!;
    const wallet = wallets.get(req.accountId)!;
    try {
      const rateLimit = checkRequestLimits(
        count.minute + 1n,
        count.day + 1n,
        tierLimits(ctx.config.TIERS, req.tier),
        now,
      );
      const { perChoice, hold } = holdFor(req, wallet.posted - wallet.held);
      wallet.held += hold.reserved;
      count.minute++;
      count.day++;
      const reservationId = newId();
      admitted.push({
        index: i,
        reservationId,
        hold,
        grant: {
          reservationId,
          reservedMicros: hold.reserved,
          maxOutputTokens: perChoice,
          rateLimit,
          holdsSlot: false,
        },
      });
    } catch (err) {
      outcomes[i] = asOutcome(err);
      refused.set(req.accountId, (refused.get(req.accountId) ?? 0) + 1);
    }
  }

  const last: Statement[] = [];
  if (refused.size > 0) last.push(uncountStatement(refused, now));
  if (admitted.length > 0) {
    const rows = admitted.map((a) => ({ req: requests[a.index]!, reservationId: a.reservationId, hold: a.hold }));
    last.push(reservationInsert(ctx, rows, now));
  }
  const results = await tx.last(...last);
  const inserted = new Set((admitted.length > 0 ? results.at(-1)! : []).map((row) => row.id as string));
  const retried = new Map<string, number>();
  for (const a of admitted) {
    if (inserted.has(a.reservationId)) {
      outcomes[a.index] = a.grant;
    } else {
      outcomes[a.index] = alreadyAuthorized();
      const accountId = requests[a.index]!.accountId;
      retried.set(accountId, (retried.get(accountId) ?? 0) + 1);
    }
  }
  return { outcomes, retried };
}

/**
 * Counts the batch's requests in every account's rate windows and locks the accounts' wallets,
 * in one statement (the wallets exist: openWallets ran first). Rows are locked in ascending
 * account order, counters first.
 */
function countAndLockWallets(perAccount: ReadonlyMap<string, number>, now: Date): Statement {
  const upsert = counterUpsert(perAccount, now);
  const accounts = [...perAccount.keys()].sort();
  return {
    sql: `with counted as (${upsert.sql})
     select w.account_id, w.posted_micros, w.held_micros,
       (select json_agg(json_build_object('account_id', c.account_id, 'window', c."window", 'count', c.count))
          from counted c) as counters
     from wallets w where w.account_id in (${accounts.map(() => "?").join(", ")})
     order by w.account_id for update of w`,
    params: [...upsert.params, ...accounts],
  };
}

/** The counts before this batch and the locked wallets, from countAndLockWallets' rows. */
function readCountsAndWallets(perAccount: ReadonlyMap<string, number>, rows: Row[]) {
  const wallets = new Map(
    rows.map((row) => [row.account_id as string, { posted: int8(row.posted_micros), held: int8(row.held_micros) }]),
  );
  for (const id of perAccount.keys()) if (!wallets.has(id)) throw new Error(`wallet ${id} not found`);
  const counters = (rows[0]?.counters ?? []) as Array<Record<string, unknown>>;
  return { counts: countsBefore(perAccount, counters), wallets };
}

/**
 * The output cap and the worst-case hold for one request, given what its account has left;
 * refuses it when that cannot pay for the prompt and one token (or the max_tokens asked for).
 */
function holdFor(req: AuthorizeRequest, available: bigint) {
  const prices = [req.inputPricePer1mMicros, req.outputPricePer1mMicros] as const;
  const room = req.contextWindow - req.inputTokens;
  const choices = choicesOf(req);
  const maxOutput =
    req.requestedMaxOutputTokens > 0n
      ? req.requestedMaxOutputTokens
      : minBig(
          req.maxOutputTokensCap,
          room,
          affordableOutputTokens(available > 0n ? available : 0n, req.inputTokens, ...prices) / choices,
        );
  const reserved = costMicros(req.inputTokens, maxOutput * choices, ...prices);
  // A free route (reserved = 0) is admitted whatever the balance: it moves no money.
  if (maxOutput === 0n || (reserved > 0n && reserved > available)) {
    const needed = maxOutput === 0n ? costMicros(req.inputTokens, choices, ...prices) : reserved;
    throw insufficientCredits(available, needed, req.requestedMaxOutputTokens > 0n);
  }
  return {
    perChoice: maxOutput,
    // The reservation covers every choice's output.
    hold: { maxOutput: maxOutput * choices, reserved, inputPricePer1m: prices[0], outputPricePer1m: prices[1] },
  };
}

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

function asOutcome(err: unknown): AppError {
  if (err instanceof AppError) return err;
  throw err;
}

/** A part of the batch failed: its requests are answered with the error, the others are not. */
function failure(ctx: BillingContext, err: unknown): AppError {
  if (err instanceof AppError) return err;
  ctx.log.error({ err }, "authorize failed");
  return new AppError("internal_error", "Internal error.");
}

/** Two batches that lock the same wallets cannot deadlock (ascending order), but a settler or the
 * sweeper taking rows in another order can: PostgreSQL then aborts one side, which is retried. */
async function withDeadlockRetry<T>(run: () => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      if (attempt >= attempts || (code !== "40P01" && code !== "40001")) throw err;
    }
  }
}
