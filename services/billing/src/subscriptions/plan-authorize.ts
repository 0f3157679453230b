import { AppError } from "@mkt/runtime/errors";
import type { AuthorizeRequest, AuthorizeResponse, RateLimitStatus } from "@mkt/proto/billing/v1/billing";
import type { TierLimits } from "../config.ts";
import type { BillingContext, Em } from "../context.ts";
import { admitRequest, currentWindows } from "../rate-limits/rate-limiter.ts";
import { checkContext, choicesOf, holdReservation, insufficientCredits } from "../reservations/reservation-hold.ts";
import { lockWallet, openWallet } from "../wallets/ledger.ts";
import {
  admitToPlan,
  concurrencyRefusal,
  countPlanTokens,
  includedTokensRefusal,
  planTerms,
  requestRateRefusal,
  tokenRateRefusal,
} from "./plan-limits.ts";
import { affordableOutput, holdFor } from "./plan-pricing.ts";
import { checkSubscription } from "./subscription-gate.ts";

const minBig = (...values: bigint[]) => values.reduce((a, b) => (b < a ? b : a));

/** The status with less room left: what the success headers report. */
const tighter = (a: RateLimitStatus, b: RateLimitStatus) => (b.remainingThisMinute < a.remainingThisMinute ? b : a);

/**
 * Authorize for a scoped key, inside the caller's transaction: the subscription's state (locked,
 * which also serializes the subscriber's Authorize calls), the plan's context and output caps,
 * the account tier limits, then the plan's per-subscriber limits (concurrency, included tokens,
 * rpm, tpm) and a hold priced from the terms snapshot, never from the route (DESIGN.md §3).
 * Every refusal throws, rolling back every counter it touched.
 */
export async function authorizePlanRequest(
  ctx: BillingContext,
  em: Em,
  req: AuthorizeRequest,
  tier: TierLimits,
  now: Date,
): Promise<AuthorizeResponse> {
  const plan = planTerms(await checkSubscription(em, req.accountId, req.subscriptionId));
  // Registry routes a scoped key to its own hoster only; anything else is refused, never priced.
  if (req.provider !== "hoster" || req.hosterId !== plan.hosterId) {
    throw new AppError("forbidden", "This key may call only its subscription's hoster models.");
  }
  // The context limit is the smaller of the plan's and the model's (DESIGN.md §4); so is the cap.
  const limits = {
    contextWindow: minBig(req.contextWindow, plan.maxContextTokens),
    maxOutputTokensCap: minBig(req.maxOutputTokensCap, plan.maxOutputTokens),
    inputTokens: req.inputTokens,
    requestedMaxOutputTokens: req.requestedMaxOutputTokens,
  };
  checkContext(limits, {
    context: plan.maxContextTokens < req.contextWindow ? "plan" : "model",
    output: plan.maxOutputTokens < req.maxOutputTokensCap ? "plan" : "model",
  });

  const tierStatus = await admitRequest(em, req.accountId, tier, now);
  const window = currentWindows(now);
  const period = await admitToPlan(em, plan, window.minuteStart, now);
  if (period.slots >= plan.maxConcurrent) throw concurrencyRefusal(plan.maxConcurrent);
  // A `subscription` plan admits requests while the period's settled use is below its allowance;
  // the request that crosses it is served in full (settlement counts its real tokens).
  if (plan.pricingModel === "subscription" && period.usedTokens >= plan.includedTokens) {
    throw includedTokensRefusal(plan, now);
  }
  if (period.minuteRequests > plan.rpmLimit) throw requestRateRefusal(plan.rpmLimit, window.minuteResetSeconds);

  // tpm counts each admitted request's worst case, prompt + output cap, when it is admitted.
  const prompt = req.inputTokens;
  const requested = req.requestedMaxOutputTokens;
  const choices = choicesOf(req);
  const tokenRoom = plan.tpmLimit - period.minuteTokens;
  const needed = prompt + (requested > 0n ? requested : 1n) * choices;
  if (needed > tokenRoom) throw tokenRateRefusal(plan.tpmLimit, tokenRoom, needed, window.minuteResetSeconds);

  await openWallet(em, req.accountId, ctx.config.STARTING_CREDIT_USD);
  const wallet = await lockWallet(em, req.accountId);
  const available = wallet.posted - wallet.held;
  // Without max_tokens the cap is the smallest of the plan's cap, the context's room, what the
  // balance pays and (so a small tpm does not refuse every such request) the minute's token room.
  const maxOutput =
    requested > 0n
      ? requested
      : minBig(
          limits.maxOutputTokensCap,
          limits.contextWindow - prompt,
          (tokenRoom - prompt) / choices,
          affordableOutput(plan, period, available, prompt) / choices,
        );
  // Every worst case below covers all `n` choices; the cap granted is per choice.
  const hold = holdFor(plan, period, prompt, maxOutput * choices);
  if (maxOutput === 0n || (hold.reserved > 0n && hold.reserved > available)) {
    const short = maxOutput === 0n ? holdFor(plan, period, prompt, choices).reserved : hold.reserved;
    throw insufficientCredits(available, short, requested > 0n);
  }
  await countPlanTokens(em, plan.subscriptionId, window.minuteStart, prompt + maxOutput * choices);

  // payg keeps its per-1M prices in the usual columns; the other models price through the plan
  // snapshot (0 per token, or the overage price beyond the included tokens).
  const payg = plan.pricingModel === "payg";
  const reservationId = await holdReservation(
    ctx,
    em,
    req,
    {
      maxOutput: maxOutput * choices,
      reserved: hold.reserved,
      inputPricePer1m: payg ? plan.inputPricePer1m : 0n,
      outputPricePer1m: payg ? plan.outputPricePer1m : 0n,
    },
    now,
    {
      subscriptionId: plan.subscriptionId,
      pricingModel: plan.pricingModel,
      periodIndex: plan.periodIndex,
      includedTokens: plan.includedTokens,
      overagePricePer1m: plan.overagePricePer1m,
      includedClaim: hold.claim,
    },
  );
  const planStatus: RateLimitStatus = {
    limitPerMinute: plan.rpmLimit,
    remainingThisMinute: plan.rpmLimit - period.minuteRequests,
    resetSeconds: BigInt(window.minuteResetSeconds),
  };
  return {
    reservationId,
    reservedMicros: hold.reserved,
    maxOutputTokens: maxOutput,
    rateLimit: tighter(tierStatus, planStatus),
    // Every subscription request holds a slot of its plan until ReleaseSlot (max_concurrent).
    holdsSlot: true,
  };
}
