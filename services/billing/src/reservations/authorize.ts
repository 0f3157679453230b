import { isUuid, newId } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import { affordableOutputTokens, costMicros } from "@mkt/runtime/money";
import type { AuthorizeRequest, AuthorizeResponse } from "@mkt/proto/billing/v1/billing";
import { int8, type BillingContext, type Em } from "../context.ts";
import {
  checkRequestLimits,
  counterUpsert,
  countsBefore,
  tierLimits,
  uncountRequests,
} from "../rate-limits/rate-limiter.ts";
import { authorizePlanRequest } from "../subscriptions/plan-authorize.ts";
import { openWallet } from "../wallets/ledger.ts";
import {
  alreadyAuthorized,
  checkContext,
  choicesOf,
  insertReservations,
  insufficientCredits,
  MAX_CHOICES,
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
 * transaction with a fixed number of statements whatever the batch size (count the rate windows
 * and lock the wallets in one, insert the reservations with their holds in another, and only when
 * some were refused, take back their counts; a wallet is opened first for an account not seen
 * before): under load the edge sends what arrived during its previous call, so one commit and a
 * handful of round trips serve dozens of requests. A part that fails answers its own requests
 * with the error; the others keep their answers.
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
      : withDeadlockRetry(() =>
          ctx.orm.em.fork().transactional((em) =>
            authorizeShared(
              ctx,
              em,
              shared.map((i) => requests[i]!),
              now,
            ),
          ),
        ).then(
          (results) => {
            results.forEach((outcome, k) => (outcomes[shared[k]!] = outcome));
            // Committed: these accounts' wallets exist from now on.
            if (ctx.openWallets.size >= 100_000) ctx.openWallets.clear();
            for (const i of shared) ctx.openWallets.add(requests[i]!.accountId);
          },
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
  em: Em,
  requests: AuthorizeRequest[],
  now: Date,
): Promise<AuthorizeOutcome[]> {
  const outcomes: AuthorizeOutcome[] = new Array(requests.length);
  const order = requests.map((_, i) => i).sort((a, b) => compare(requests[a]!.accountId, requests[b]!.accountId));
  const perAccount = new Map<string, number>();
  for (const i of order) perAccount.set(requests[i]!.accountId, (perAccount.get(requests[i]!.accountId) ?? 0) + 1);
  const accounts = [...perAccount.keys()];

  for (const accountId of accounts) {
    if (!ctx.openWallets.has(accountId)) await openWallet(em, accountId, ctx.config.STARTING_CREDIT_USD);
  }
  const { counts, wallets } = await countAndLockWallets(em, perAccount, now);

  // Each request as if alone, in account order: a refused one is not counted and holds nothing,
  // so the requests after it see the counts and the balance it left.
  const admitted: Admitted[] = [];
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
    }
  }

  // A request id authorized by an earlier call is refused here; its hold is never added.
  const inserted = await insertReservations(
    ctx,
    em,
    admitted.map((a) => ({ req: requests[a.index]!, reservationId: a.reservationId, hold: a.hold })),
    now,
  );
  for (const a of admitted) outcomes[a.index] = inserted.has(a.reservationId) ? a.grant : alreadyAuthorized();
  const refused = new Map<string, number>();
  order.forEach((i) => {
    if (outcomes[i] instanceof AppError) {
      const accountId = requests[i]!.accountId;
      refused.set(accountId, (refused.get(accountId) ?? 0) + 1);
    }
  });
  await uncountRequests(em, refused, now);
  return outcomes;
}

/**
 * Counts the batch's requests in every account's rate windows and locks the accounts' wallets,
 * in one round trip (the wallets exist: openWallet ran first for any account not known to have
 * one). Rows are locked in ascending account order, counters first.
 */
async function countAndLockWallets(em: Em, perAccount: ReadonlyMap<string, number>, now: Date) {
  const upsert = counterUpsert(perAccount, now);
  const accounts = [...perAccount.keys()].sort();
  const rows = await em.execute(
    `with counted as (${upsert.sql})
     select w.account_id, w.posted_micros, w.held_micros,
       (select json_agg(json_build_object('account_id', c.account_id, 'window', c."window", 'count', c.count))
          from counted c) as counters
     from wallets w where w.account_id in (${accounts.map(() => "?").join(", ")})
     order by w.account_id for update of w`,
    [...upsert.params, ...accounts],
  );
  const wallets = new Map(
    rows.map((row) => [row.account_id as string, { posted: int8(row.posted_micros), held: int8(row.held_micros) }]),
  );
  for (const id of accounts) if (!wallets.has(id)) throw new Error(`wallet ${id} not found`);
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
