import { isUuid } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import type {
  GetHosterRequest,
  GetHosterResponse,
  ListHostersResponse,
  UpdateHosterModelRequest,
  UpdateHosterModelResponse,
} from "@mkt/proto/registry/v1/registry";
import { productView } from "../products/product-view.ts";
import { hosterView, type EndpointFiguresByModel } from "./hoster-view.ts";
import { isModelId, validCanonicalId, validQuantization } from "./registration-request.ts";
import type { HostersContext } from "./hosters-context.ts";

/**
 * Every hoster model's live figures (on the hosters' clock) and verification verdict, or only
 * those of `hosterId`'s models (a view of one hoster reads no one else's).
 */
export async function figuresByModel(ctx: HostersContext, hosterId?: string): Promise<EndpointFiguresByModel> {
  const [stats, verdicts] = await Promise.all([
    ctx.minutes.stats(ctx.clock(), hosterId, { hours: true }),
    ctx.verification.verdicts(hosterId),
  ]);
  return { stats, verdicts };
}

const hosterNotFound = () => new AppError("not_found", "No such hoster.", { param: "hoster_id" });

/** GET /hosters/me: one registered hoster with its models' live figures, never its token. */
export async function getHoster(ctx: HostersContext, req: GetHosterRequest): Promise<GetHosterResponse> {
  // Ids arrive from other services as strings; a malformed one must never reach a uuid column.
  if (!isUuid(req.hosterId)) throw hosterNotFound();
  const [hoster, figures] = await Promise.all([ctx.store.get(req.hosterId), figuresByModel(ctx, req.hosterId)]);
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

/**
 * PATCH /hosters/me/models: a hoster names the public model its model serves, or its
 * quantization, after registration. Both are part of the routing table, so the change is announced.
 */
export async function updateHosterModel(
  ctx: HostersContext,
  req: UpdateHosterModelRequest,
): Promise<UpdateHosterModelResponse> {
  if (!isUuid(req.hosterId)) throw hosterNotFound();
  const change = {
    canonicalId: req.canonicalId === undefined ? undefined : validCanonicalId(req.canonicalId, "canonical_id"),
    quantization: req.quantization === undefined ? undefined : validQuantization(req.quantization, "quantization"),
  };
  const noSuchModel = () => new AppError("not_found", "You have no model with this model_id.", { param: "model_id" });
  // One registration could never have accepted (a control character, say) names none, unread.
  if (!isModelId(req.modelId)) throw noSuchModel();
  const model = await ctx.store.updateModel(req.hosterId, req.modelId, change);
  if (!model) throw noSuchModel();
  ctx.announce(req.hosterId);
  const hoster = await ctx.store.get(req.hosterId);
  const view = hosterView(hoster!, await figuresByModel(ctx, req.hosterId));
  return { model: view.models.find((m) => m.modelId === model.modelId) };
}
