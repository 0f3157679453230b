import type { FastifyInstance } from "fastify";
import {
  ArchiveProductRequest,
  CreateProductRequest,
  ListProductsRequest,
  UpdateProductRequest,
} from "@mkt/proto/registry/v1/registry";
import { principalSession } from "../plugins/session-auth.ts";
import {
  createProductSchema,
  patchProductSchema,
  toPatch,
  toTerms,
  type ProductBody,
} from "../products/product-body.ts";
import { productSchema, renderProduct } from "../products/render-product.ts";
import type { RouteDeps } from "./route-deps.ts";
import { listOf, replies } from "./response-schemas.ts";

const productParams = {
  type: "object",
  required: ["product_id"],
  properties: { product_id: { type: "string", maxLength: 64 } },
} as const;

/**
 * A hoster's plans: create, list, edit, archive. Every route needs a hoster session;
 * the hoster is always the session's, never a body field. Registry checks the terms and answers
 * not_found for a plan of another hoster.
 */
export function productRoutes(app: FastifyInstance, deps: RouteDeps): void {
  const onRequest = deps.session("hoster");
  const tags = ["hosters"];

  app.post<{ Body: ProductBody }>(
    "/hosters/products",
    {
      onRequest,
      schema: { summary: "Create a plan", response: replies(201, productSchema), tags, body: createProductSchema },
    },
    async (request, reply) => {
      const { product } = await deps.backends.registry.createProduct(
        CreateProductRequest.fromPartial({
          hosterId: principalSession(request).subjectId,
          terms: toTerms(request.body),
        }),
      );
      return reply.code(201).send(renderProduct(product!));
    },
  );

  app.get(
    "/hosters/products",
    {
      onRequest,
      schema: {
        summary: "Your plans, archived ones included, oldest first",
        response: replies(200, listOf(productSchema)),
        tags,
      },
    },
    async (request) => {
      const { products } = await deps.backends.registry.listProducts(
        ListProductsRequest.fromPartial({ hosterId: principalSession(request).subjectId }),
      );
      return { object: "list", data: products.map(renderProduct) };
    },
  );

  app.patch<{ Params: { product_id: string }; Body: ProductBody }>(
    "/hosters/products/:product_id",
    {
      onRequest,
      schema: {
        summary: "Edit a plan: new subscriptions get the new terms, existing ones from their next renewal",
        response: replies(200, productSchema),
        tags,
        params: productParams,
        body: patchProductSchema,
      },
    },
    async (request) => {
      const { product } = await deps.backends.registry.updateProduct(
        UpdateProductRequest.fromPartial({
          hosterId: principalSession(request).subjectId,
          productId: request.params.product_id,
          patch: toPatch(request.body),
        }),
      );
      return renderProduct(product!);
    },
  );

  app.post<{ Params: { product_id: string } }>(
    "/hosters/products/:product_id/archive",
    {
      onRequest,
      schema: {
        summary: "Archive a plan: it takes no new subscribers; existing ones keep it",
        response: replies(200, productSchema),
        tags,
        params: productParams,
      },
    },
    async (request) => {
      const { product } = await deps.backends.registry.archiveProduct(
        ArchiveProductRequest.fromPartial({
          hosterId: principalSession(request).subjectId,
          productId: request.params.product_id,
        }),
      );
      return renderProduct(product!);
    },
  );
}
