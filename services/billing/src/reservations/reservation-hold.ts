import { AppError } from "@mkt/runtime/errors";
import { newId } from "@mkt/runtime/ids";
import type { Micros } from "@mkt/runtime/money";
import { executeStatement, type Statement } from "@mkt/runtime/pipelined-transaction";
import type { AuthorizeRequest } from "@mkt/proto/billing/v1/billing";
import type { BillingContext, Em } from "../context.ts";
import { formatUsd } from "../wallets/ledger.ts";

/** OpenAI's own bound on `n`. */
export const MAX_CHOICES = 128n;

/**
 * How many choices the upstream generates (the client's `n`). Each may use the whole output cap,
 * so every worst case (hold, tpm, included-tokens claim) covers cap × choices, while the cap
 * granted stays per choice.
 */
export const choicesOf = (req: AuthorizeRequest): bigint => (req.choices > 1n ? req.choices : 1n);

/** The request limits a context check needs; a plan narrows the route's. */
export type ContextLimits = Pick<
  AuthorizeRequest,
  "contextWindow" | "maxOutputTokensCap" | "inputTokens" | "requestedMaxOutputTokens"
>;

/** Who sets each limit, for the messages ("This model's" / "This plan's"). */
export interface LimitSources {
  context: "model" | "plan";
  output: "model" | "plan";
}

const MODEL_LIMITS: LimitSources = { context: "model", output: "model" };

/**
 * The prompt must fit the context with room for output, and max_tokens must fit both the cap and
 * that room (DESIGN.md §4): 400 context_length_exceeded / max_tokens_exceeded.
 */
export function checkContext(req: ContextLimits, sources: LimitSources = MODEL_LIMITS): void {
  const room = req.contextWindow - req.inputTokens;
  if (room < 0n || (room === 0n && req.requestedMaxOutputTokens === 0n)) {
    throw new AppError(
      "context_length_exceeded",
      `This ${sources.context}'s maximum context length is ${req.contextWindow} tokens, but the messages use ${req.inputTokens} tokens` +
        (room === 0n ? ", leaving no room for output." : "."),
      { param: "messages" },
    );
  }
  const requested = req.requestedMaxOutputTokens;
  if (requested > req.maxOutputTokensCap) {
    throw new AppError(
      "max_tokens_exceeded",
      `max_tokens is ${requested}, but this ${sources.output} allows at most ${req.maxOutputTokensCap} output tokens.`,
      { param: "max_tokens" },
    );
  }
  if (requested > room) {
    throw new AppError(
      "max_tokens_exceeded",
      `max_tokens is ${requested}, but only ${room} tokens are left in the ${req.contextWindow}-token context after the ${req.inputTokens}-token prompt.`,
      { param: "max_tokens" },
    );
  }
}

export function insufficientCredits(available: Micros, needed: Micros, maxTokensGiven: boolean): AppError {
  return new AppError(
    "insufficient_credits",
    `Insufficient credits: your balance is ${formatUsd(available)} and this request needs ${formatUsd(needed)}` +
      (maxTokensGiven ? " (prompt plus max_tokens)." : " (prompt plus at least one output token)."),
  );
}

/** What a subscription's reservation snapshots for its settlement (DESIGN.md §2: never re-read). */
export interface PlanSnapshot {
  subscriptionId: string;
  pricingModel: string;
  periodIndex: number;
  includedTokens: bigint;
  overagePricePer1m: Micros;
  includedClaim: bigint;
}

export const alreadyAuthorized = () =>
  new AppError("invalid_request", "request_id was already authorized.", { param: "request_id" });

/** One reservation to insert: the request, its id and what it holds. */
export interface NewReservation {
  req: AuthorizeRequest;
  reservationId: string;
  hold: { maxOutput: bigint; reserved: Micros; inputPricePer1m: Micros; outputPricePer1m: Micros };
  plan?: PlanSnapshot;
}

/**
 * The statement that inserts reservations and adds their holds to the (locked) wallets; a
 * request id authorized before is skipped and holds nothing. It returns the ids of the
 * reservations inserted (the caller refuses the others).
 */
export function reservationInsert(ctx: BillingContext, rows: readonly NewReservation[], now: Date): Statement {
  const expiresAt = new Date(now.getTime() + ctx.config.RESERVATION_TTL_SECONDS * 1000);
  return {
    sql: `with inserted as (
       insert into reservations (id, request_id, account_id, key_id, model_id, provider, hoster_id,
         input_price_per_1m_micros, output_price_per_1m_micros, input_tokens, max_output_tokens,
         reserved_micros, status, created_at, expires_at, subscription_id, pricing_model, period_index,
         included_tokens, overage_price_per_1m_micros, included_claim)
       values ${rows.map(() => "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'held', ?, ?, ?, ?, ?, ?, ?, ?)").join(", ")}
       on conflict (request_id) do nothing returning id, account_id, reserved_micros
     ), holds as (
       update wallets w set held_micros = w.held_micros + h.amount
       from (select account_id, sum(reserved_micros) as amount from inserted group by account_id) h
       where w.account_id = h.account_id and h.amount <> 0
     )
     select id from inserted`,
    params: rows.flatMap(({ req, reservationId, hold, plan }) => [
      reservationId,
      req.requestId,
      req.accountId,
      req.keyId,
      req.modelId,
      req.provider,
      req.hosterId,
      hold.inputPricePer1m,
      hold.outputPricePer1m,
      req.inputTokens,
      hold.maxOutput,
      hold.reserved,
      now,
      expiresAt,
      plan?.subscriptionId ?? null,
      plan?.pricingModel ?? null,
      plan?.periodIndex ?? null,
      plan?.includedTokens ?? null,
      plan?.overagePricePer1m ?? null,
      plan?.includedClaim ?? 0n,
    ]),
  };
}

/**
 * Inserts the reservation and holds `reserved` on the wallet; a request id seen before is refused.
 * Returns the reservation id.
 */
export async function holdReservation(
  ctx: BillingContext,
  em: Em,
  req: AuthorizeRequest,
  hold: NewReservation["hold"],
  now: Date,
  plan?: PlanSnapshot,
): Promise<string> {
  const reservationId = newId();
  const inserted = await executeStatement(em, reservationInsert(ctx, [{ req, reservationId, hold, plan }], now));
  if (inserted.length === 0) throw alreadyAuthorized();
  return reservationId;
}
