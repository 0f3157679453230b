import { AppError } from "@mkt/runtime/errors";
import { affordableOutputTokens, costMicros } from "@mkt/runtime/money";
import { newId } from "@mkt/runtime/ids";
import type { AuthorizeRequest, AuthorizeResponse } from "@mkt/proto/billing/v1/billing";
import { isUuid, type BillingContext } from "../context.ts";
import { admitRequest, tierLimits } from "../rate-limits/rate-limiter.ts";
import { checkSubscription } from "../subscriptions/subscription-gate.ts";
import { formatUsd, lockWallet, openWallet } from "../wallets/ledger.ts";

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
}

/**
 * Context checks need no database, so they run before the transaction: a request refused here
 * costs no round trip and, like every refusal, is not counted against the rate limits.
 */
function checkContext(req: AuthorizeRequest): void {
  const room = req.contextWindow - req.inputTokens;
  if (room < 0n || (room === 0n && req.requestedMaxOutputTokens === 0n)) {
    throw new AppError(
      "context_length_exceeded",
      `This model's maximum context length is ${req.contextWindow} tokens, but the messages use ${req.inputTokens} tokens` +
        (room === 0n ? ", leaving no room for output." : "."),
      { param: "messages" },
    );
  }
  const requested = req.requestedMaxOutputTokens;
  if (requested > req.maxOutputTokensCap) {
    throw new AppError(
      "max_tokens_exceeded",
      `max_tokens is ${requested}, but this model allows at most ${req.maxOutputTokensCap} output tokens.`,
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

const minBig = (...values: bigint[]) => values.reduce((a, b) => (b < a ? b : a));

/**
 * The hot-path step (DESIGN.md §2): a scoped key's subscription state, rate limits, output cap
 * and a hold of the worst-case cost, in one transaction. Any refusal throws, which rolls
 * everything back (counters included).
 */
export async function authorize(ctx: BillingContext, req: AuthorizeRequest): Promise<AuthorizeResponse> {
  validate(req);
  checkContext(req);
  const now = ctx.clock();
  const prices = [req.inputPricePer1mMicros, req.outputPricePer1mMicros] as const;
  const limits = tierLimits(ctx.config.TIERS, req.tier);

  return ctx.orm.em.fork().transactional(async (em) => {
    if (req.subscriptionId !== "") await checkSubscription(em, req.accountId, req.subscriptionId);
    const rateLimit = await admitRequest(em, req.accountId, limits, now);
    await openWallet(em, req.accountId, ctx.config.STARTING_CREDIT_USD);
    const wallet = await lockWallet(em, req.accountId);
    const available = wallet.posted - wallet.held;

    const room = req.contextWindow - req.inputTokens;
    const maxOutput =
      req.requestedMaxOutputTokens > 0n
        ? req.requestedMaxOutputTokens
        : minBig(
            req.maxOutputTokensCap,
            room,
            affordableOutputTokens(available > 0n ? available : 0n, req.inputTokens, ...prices),
          );
    const reserved = costMicros(req.inputTokens, maxOutput, ...prices);
    // A free route (reserved = 0) is admitted whatever the balance: it moves no money.
    if (maxOutput === 0n || (reserved > 0n && reserved > available)) {
      const needed = maxOutput === 0n ? costMicros(req.inputTokens, 1n, ...prices) : reserved;
      throw new AppError(
        "insufficient_credits",
        `Insufficient credits: your balance is ${formatUsd(available)} and this request needs ${formatUsd(needed)}` +
          (req.requestedMaxOutputTokens > 0n
            ? " (prompt plus max_tokens)."
            : " (prompt plus at least one output token)."),
      );
    }

    if (reserved > 0n) {
      await em.execute(`update wallets set held_micros = held_micros + ? where account_id = ?`, [
        reserved,
        req.accountId,
      ]);
    }
    const reservationId = newId();
    const inserted = await em.execute(
      `insert into reservations (id, request_id, account_id, key_id, model_id, provider, hoster_id,
         input_price_per_1m_micros, output_price_per_1m_micros, input_tokens, max_output_tokens,
         reserved_micros, status, created_at, expires_at)
       values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'held', ?, ?)
       on conflict (request_id) do nothing returning id`,
      [
        reservationId,
        req.requestId,
        req.accountId,
        req.keyId,
        req.modelId,
        req.provider,
        req.hosterId,
        req.inputPricePer1mMicros,
        req.outputPricePer1mMicros,
        req.inputTokens,
        maxOutput,
        reserved,
        now,
        new Date(now.getTime() + ctx.config.RESERVATION_TTL_SECONDS * 1000),
      ],
    );
    if (inserted.length === 0) {
      throw new AppError("invalid_request", "request_id was already authorized.", { param: "request_id" });
    }
    return { reservationId, reservedMicros: reserved, maxOutputTokens: maxOutput, rateLimit };
  });
}
