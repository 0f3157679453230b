import type { GetUsageTokensRequest, GetUsageTokensResponse } from "@mkt/proto/billing/v1/billing";
import type { BillingContext } from "../context.ts";
import { addFigures, NO_USAGE, usageSeries } from "./usage-series.ts";
import { usageOwner } from "./usage-owner.ts";
import { reportWindow, requireDays, requireInterval } from "./usage-window.ts";

/** GET /v1/usage/tokens: the owner's zero-filled series and its totals, from the hourly rollups. */
export async function usageTokens(
  ctx: BillingContext,
  request: GetUsageTokensRequest,
): Promise<GetUsageTokensResponse> {
  const owner = usageOwner(request);
  const days = requireDays(request.days);
  const interval = requireInterval(request.interval);
  const em = ctx.orm.em.fork();
  const window = await reportWindow(em, ctx.clock(), days, interval);
  const timeseries = await usageSeries(em, owner, window, interval);
  // Totals are the sum of the buckets shown, so the two can never disagree.
  const totals = timeseries.reduce((sum, bucket) => addFigures(sum, bucket.figures ?? NO_USAGE), NO_USAGE);
  return { totals, timeseries };
}
