import { AppError } from "@mkt/runtime/errors";
import type { ListEndpointsRequest, ListEndpointsResponse, ModelEndpoint } from "@mkt/proto/registry/v1/registry";
import { endpointPrice } from "../catalog/open-routing.ts";
import { productView } from "../products/product-view.ts";
import { figuresByModel } from "./hoster-handlers.ts";
import { hosterView } from "./hoster-view.ts";
import type { HostersContext } from "./hosters-context.ts";

/** Longer than any canonical_id registration accepts: a longer one names no endpoint. */
const MAX_CANONICAL_ID_CHARS = 256;

/**
 * GET /v1/models/{canonical_id}/endpoints: every registered hoster's model of that public name on
 * each of the hoster's active open plans, with the model's live figures and verification,
 * cheapest first (then by hoster name). The same reads as the hoster list, filtered here: there
 * are few hosters, and their rows are what GET /v1/hosters shows already. An id no endpoint
 * serves is not_found, as an unknown model is.
 */
export async function listEndpoints(ctx: HostersContext, req: ListEndpointsRequest): Promise<ListEndpointsResponse> {
  const wanted = req.canonicalId.trim().toLowerCase();
  if (wanted === "" || wanted.length > MAX_CANONICAL_ID_CHARS) throw modelNotFound(req.canonicalId);
  const [hosters, plans, figures] = await Promise.all([
    ctx.store.list(),
    ctx.products.activeByHoster(),
    figuresByModel(ctx),
  ]);
  const endpoints: ModelEndpoint[] = [];
  for (const hoster of hosters) {
    const open = (plans.get(hoster.id) ?? []).filter((plan) => plan.terms.open);
    if (open.length === 0) continue;
    const view = hosterView(hoster, figures);
    for (const model of view.models) {
      if (model.canonicalId.toLowerCase() !== wanted) continue;
      for (const plan of open) {
        endpoints.push({
          hosterId: hoster.id,
          hosterName: hoster.name,
          hosterStatus: hoster.status,
          model,
          plan: productView(plan),
        });
      }
    }
  }
  if (endpoints.length === 0) throw modelNotFound(req.canonicalId);
  // Cheapest first, as routing's rule prices an endpoint (input and output together).
  const price = (e: ModelEndpoint) => endpointPrice(e.plan!.terms!);
  endpoints.sort((a, b) => price(a) - price(b) || a.hosterName.localeCompare(b.hosterName));
  return { endpoints };
}

const modelNotFound = (id: string) =>
  new AppError("model_not_found", `No open endpoint serves the model \`${id}\`.`, { param: "canonical_id" });
