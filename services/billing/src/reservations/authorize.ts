import { isUuid } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import { affordableOutputTokens, costMicros } from "@mkt/runtime/money";
import type { AuthorizeRequest, AuthorizeResponse } from "@mkt/proto/billing/v1/billing";
import type { BillingContext } from "../context.ts";
import { admitRequest, tierLimits } from "../rate-limits/rate-limiter.ts";
import { authorizePlanRequest } from "../subscriptions/plan-authorize.ts";
import { lockWallet, openWallet } from "../wallets/ledger.ts";
import { checkContext, choicesOf, holdReservation, insufficientCredits, MAX_CHOICES } from "./reservation-hold.ts";

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

/**
 * The hot-path step (DESIGN.md §2): a scoped key's subscription state and plan limits, rate
 * limits, output cap and a hold of the worst-case cost, in one transaction. Any refusal throws,
 * which rolls everything back (counters included).
 */
export async function authorize(ctx: BillingContext, req: AuthorizeRequest): Promise<AuthorizeResponse> {
  validate(req);
  const now = ctx.clock();
  const limits = tierLimits(ctx.config.TIERS, req.tier);
  // A scoped key's request is priced and limited by its subscription's plan, read in the same
  // transaction (the subscription row lock also serializes the subscriber's Authorize calls).
  if (req.subscriptionId !== "") {
    return ctx.orm.em.fork().transactional((em) => authorizePlanRequest(ctx, em, req, limits, now));
  }
  // Context checks need no database, so they run before the transaction: a request refused here
  // costs no round trip and, like every refusal, is not counted against the rate limits.
  checkContext(req);
  const prices = [req.inputPricePer1mMicros, req.outputPricePer1mMicros] as const;

  return ctx.orm.em.fork().transactional(async (em) => {
    const rateLimit = await admitRequest(em, req.accountId, limits, now);
    await openWallet(em, req.accountId, ctx.config.STARTING_CREDIT_USD);
    const wallet = await lockWallet(em, req.accountId);
    const available = wallet.posted - wallet.held;

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
    const reservationId = await holdReservation(
      ctx,
      em,
      req,
      // The reservation covers every choice's output.
      { maxOutput: maxOutput * choices, reserved, inputPricePer1m: prices[0], outputPricePer1m: prices[1] },
      now,
    );
    return { reservationId, reservedMicros: reserved, maxOutputTokens: maxOutput, rateLimit };
  });
}
