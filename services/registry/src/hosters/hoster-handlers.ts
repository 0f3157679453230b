import { isUuid } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import type { GetHosterRequest, GetHosterResponse, ListHostersResponse } from "@mkt/proto/registry/v1/registry";
import { productView } from "../products/product-view.ts";
import { hosterView } from "./hoster-view.ts";
import type { HostersContext } from "./hosters-context.ts";

const hosterNotFound = () => new AppError("not_found", "No such hoster.", { param: "hoster_id" });

/** GET /hosters/me: one registered hoster, never its token. */
export async function getHoster(ctx: HostersContext, req: GetHosterRequest): Promise<GetHosterResponse> {
  // Ids arrive from other services as strings; a malformed one must never reach a uuid column.
  if (!isUuid(req.hosterId)) throw hosterNotFound();
  const hoster = await ctx.store.get(req.hosterId);
  if (!hoster) throw hosterNotFound();
  return { hoster: hosterView(hoster) };
}

/** GET /v1/hosters: every registered hoster with its status, models and active plans. */
export async function listHosters(ctx: HostersContext): Promise<ListHostersResponse> {
  const [hosters, plans] = await Promise.all([ctx.store.list(), ctx.products.activeByHoster()]);
  return {
    hosters: hosters.map((hoster) => ({
      ...hosterView(hoster),
      plans: (plans.get(hoster.id) ?? []).map(productView),
    })),
  };
}
