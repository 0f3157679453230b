import { isUuid } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import type { GetHosterRequest, GetHosterResponse, ListHostersResponse } from "@mkt/proto/registry/v1/registry";
import { productView } from "../products/product-view.ts";
import { hosterView, type EndpointFiguresByModel } from "./hoster-view.ts";
import type { HostersContext } from "./hosters-context.ts";

/** Every hoster model's live figures (on the hosters' clock) and verification verdict. */
export async function figuresByModel(ctx: HostersContext): Promise<EndpointFiguresByModel> {
  const [stats, verdicts] = await Promise.all([ctx.minutes.stats(ctx.clock()), ctx.verification.verdicts()]);
  return { stats, verdicts };
}

const hosterNotFound = () => new AppError("not_found", "No such hoster.", { param: "hoster_id" });

/** GET /hosters/me: one registered hoster with its models' live figures, never its token. */
export async function getHoster(ctx: HostersContext, req: GetHosterRequest): Promise<GetHosterResponse> {
  // Ids arrive from other services as strings; a malformed one must never reach a uuid column.
  if (!isUuid(req.hosterId)) throw hosterNotFound();
  const [hoster, figures] = await Promise.all([ctx.store.get(req.hosterId), figuresByModel(ctx)]);
  if (!hoster) throw hosterNotFound();
  return { hoster: hosterView(hoster, figures) };
}

/** GET /v1/hosters: every registered hoster with its status, models (and their live figures) and active plans. */
export async function listHosters(ctx: HostersContext): Promise<ListHostersResponse> {
  const [hosters, plans, figures] = await Promise.all([
    ctx.store.list(),
    ctx.products.activeByHoster(),
    figuresByModel(ctx),
  ]);
  return {
    hosters: hosters.map((hoster) => ({
      ...hosterView(hoster, figures),
      plans: (plans.get(hoster.id) ?? []).map(productView),
    })),
  };
}
