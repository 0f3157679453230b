import { Product } from "@mkt/proto/registry/v1/registry";
import type { StoredProduct } from "./product-store.ts";

/** A stored plan as the API carries it. */
export function productView(product: StoredProduct): Product {
  return Product.fromPartial({
    productId: product.id,
    hosterId: product.hosterId,
    terms: product.terms,
    status: product.status,
    createdAt: product.createdAt.toISOString(),
    updatedAt: product.updatedAt.toISOString(),
  });
}
