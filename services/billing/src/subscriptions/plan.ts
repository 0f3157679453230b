import { isUuid } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import { chargesMonthly, isPricingModel } from "@mkt/runtime/pricing-models";
import type { ProductTerms } from "@mkt/proto/registry/v1/registry";
import type { BillingContext } from "../context.ts";

/** What a subscription needs of a plan: its hoster and the terms to snapshot. */
export interface Plan {
  productId: string;
  hosterId: string;
  hosterName: string;
  terms: ProductTerms;
}

export const productNotFound = () =>
  new AppError("not_found", "No such product: check product_id against GET /v1/hosters.", { param: "product_id" });

/** The price charged when a period starts. */
export function monthlyCharge(terms: ProductTerms): bigint {
  return chargesMonthly(terms.pricingModel) ? terms.monthlyPriceMicros : 0n;
}

/**
 * The plan from registry, refusing what takes no subscribers: an unknown product is not_found,
 * an archived one invalid_request (it exists, and its hoster's subscribers keep it, but it is
 * closed to new ones; saying so beats pretending it is gone).
 */
export async function fetchPlan(ctx: BillingContext, productId: string): Promise<Plan> {
  const { plan, status } = await fetchProduct(ctx, productId);
  if (status !== "active") {
    throw new AppError("invalid_request", "This plan is archived and takes no new subscribers.", {
      param: "product_id",
    });
  }
  return plan;
}

/** A plan as registry has it now; `status` is active or archived (closed to new subscribers). */
export interface CurrentPlan {
  plan: Plan;
  status: string;
}

/** The plan from registry as it is now, archived or not (renewal needs both; the saga refuses archived ones). */
export async function fetchProduct(ctx: BillingContext, productId: string): Promise<CurrentPlan> {
  const res = await ctx.registry.getProduct({ productId }, { timeoutMs: 10_000 }).catch((err: unknown) => {
    if (err instanceof AppError && err.code === "not_found") throw productNotFound();
    throw err;
  });
  const product = res.product;
  if (!product?.terms) throw productNotFound();
  const terms = product.terms;
  // Registry validates plans; a malformed one here is a bug there, not the customer's fault.
  if (!isUuid(product.hosterId) || !isPricingModel(terms.pricingModel) || terms.monthlyPriceMicros < 0n) {
    throw new Error(`registry returned a malformed plan ${productId}`);
  }
  return { plan: { productId, hosterId: product.hosterId, hosterName: res.hosterName, terms }, status: product.status };
}
