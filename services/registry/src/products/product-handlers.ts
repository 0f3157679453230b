import { AppError } from "@mkt/runtime/errors";
import { isUuid, newId } from "@mkt/runtime/ids";
import {
  ProductTerms,
  type ArchiveProductRequest,
  type ArchiveProductResponse,
  type CreateProductRequest,
  type CreateProductResponse,
  type GetProductRequest,
  type GetProductResponse,
  type ListProductsRequest,
  type ListProductsResponse,
  type UpdateProductRequest,
  type UpdateProductResponse,
} from "@mkt/proto/registry/v1/registry";
import type { HostersContext } from "../hosters/hosters-context.ts";
import type { ProductStore } from "./product-store.ts";
import { patchTerms, sameTerms, validateTerms } from "./product-terms.ts";
import { productView } from "./product-view.ts";

/** Plans one hoster may have: active ones are what customers browse; all of them, what it lists. */
export const MAX_ACTIVE_PRODUCTS = 50;
export const MAX_PRODUCTS = 500;

// Another hoster's plan gets the same answer as no plan at all, so ids cannot be probed.
const productNotFound = () => new AppError("not_found", "No such product.", { param: "product_id" });
const hosterNotFound = () => new AppError("not_found", "No such hoster.", { param: "hoster_id" });

/** What the writing handlers need: the plans, and the catalog.changed hint sent after a commit. */
type ProductsContext = Pick<HostersContext, "products" | "announce">;

/** POST /hosters/products: a new active plan of the calling hoster. */
export async function createProduct(ctx: ProductsContext, req: CreateProductRequest): Promise<CreateProductResponse> {
  if (!isUuid(req.hosterId)) throw hosterNotFound();
  const terms = validateTerms(req.terms ?? ProductTerms.fromPartial({}));
  const result = await ctx.products.insert(
    { id: newId(), hosterId: req.hosterId, terms },
    { maxActive: MAX_ACTIVE_PRODUCTS, maxTotal: MAX_PRODUCTS },
  );
  if (result === "no_hoster") throw hosterNotFound();
  if (result === "too_many_active") {
    throw new AppError(
      "invalid_request",
      `A hoster may have at most ${MAX_ACTIVE_PRODUCTS} active plans; archive one first.`,
    );
  }
  if (result === "too_many") throw new AppError("invalid_request", `A hoster may have at most ${MAX_PRODUCTS} plans.`);
  ctx.announce(req.hosterId);
  return { product: productView(result) };
}

/** GET /hosters/products: the hoster's plans, archived ones included. */
export async function listProducts(store: ProductStore, req: ListProductsRequest): Promise<ListProductsResponse> {
  if (!isUuid(req.hosterId)) return { products: [] };
  return { products: (await store.listByHoster(req.hosterId)).map(productView) };
}

/** One plan, archived or not, with its hoster (the subscription saga decides what to accept). */
export async function getProduct(store: ProductStore, req: GetProductRequest): Promise<GetProductResponse> {
  if (!isUuid(req.productId)) throw productNotFound();
  const found = await store.getWithHoster(req.productId);
  // A plan of a hoster whose registration never completed is nobody's plan.
  if (!found || found.hosterStatus === "registering") throw productNotFound();
  return { product: productView(found.product), hosterName: found.hosterName, hosterStatus: found.hosterStatus };
}

/**
 * Edits one of the hoster's plans. An archived plan is frozen: it takes no new subscribers, and
 * changing it would only change the renewals of the subscribers it still has, out of sight of the
 * public plan list.
 */
export async function updateProduct(ctx: ProductsContext, req: UpdateProductRequest): Promise<UpdateProductResponse> {
  if (!isUuid(req.productId) || !isUuid(req.hosterId)) throw productNotFound();
  let changed = false;
  const product = await ctx.products.modify(req.hosterId, req.productId, (current) => {
    if (current.status === "archived") {
      throw new AppError("invalid_request", "This plan is archived; an archived plan cannot be edited.", {
        param: "product_id",
      });
    }
    const next = patchTerms(current.terms, req.patch ?? {});
    changed = !sameTerms(next, current.terms);
    return changed ? next : undefined;
  });
  if (!product) throw productNotFound();
  if (changed) ctx.announce(req.hosterId);
  return { product: productView(product) };
}

/** Archives one of the hoster's plans; archiving an archived plan returns it unchanged. */
export async function archiveProduct(
  ctx: ProductsContext,
  req: ArchiveProductRequest,
): Promise<ArchiveProductResponse> {
  if (!isUuid(req.productId) || !isUuid(req.hosterId)) throw productNotFound();
  let changed = false;
  const product = await ctx.products.modify(req.hosterId, req.productId, (current) => {
    changed = current.status !== "archived";
    return changed ? "archive" : undefined;
  });
  if (!product) throw productNotFound();
  if (changed) ctx.announce(req.hosterId);
  return { product: productView(product) };
}
