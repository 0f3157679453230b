import { randomUUID } from "node:crypto";
import { AppError } from "@mkt/runtime/errors";
import { startGrpcServer, unary } from "@mkt/runtime/grpc-server";
import type { Logger } from "@mkt/runtime/logger";
import { testCertificates } from "@mkt/testkit/test-certificates";
import {
  RegistryServiceService,
  type GetProductRequest,
  type GetProductResponse,
  type ListProductsRequest,
  type ListProductsResponse,
  type Product,
  type ProductTerms,
} from "@mkt/proto/registry/v1/registry";
import { REGISTRY_CALLERS } from "../../registry/src/registry-callers.ts";

/**
 * A small real registry gRPC server with only what the subscription saga asks of registry:
 * GetProduct, answering not_found for unknown ids. It holds registry's certificate and caller table. It is billing's collaborator here, not what is
 * under test; services/registry has its own tests of plans.
 */
export async function startRegistryDouble(log: Logger) {
  const products = new Map<string, { product: Product; hosterName: string }>();
  let failing = false;
  const handle = await startGrpcServer(
    "127.0.0.1",
    0,
    [
      [
        RegistryServiceService,
        {
          getProduct: unary(log, "GetProduct", async (req: GetProductRequest): Promise<GetProductResponse> => {
            if (failing) throw new AppError("service_unavailable", "registry is down");
            const found = products.get(req.productId);
            if (!found) throw new AppError("not_found", "No such product.");
            return { product: found.product, hosterName: found.hosterName, hosterStatus: "healthy" };
          }),
          listProducts: unary(log, "ListProducts", async (req: ListProductsRequest): Promise<ListProductsResponse> => {
            if (failing) throw new AppError("service_unavailable", "registry is down");
            const mine = [...products.values()].filter((found) => found.product.hosterId === req.hosterId);
            return { products: mine.map((found) => found.product) };
          }),
        },
        REGISTRY_CALLERS,
      ],
    ],
    { tls: (await testCertificates()).tls("registry"), log },
  );
  return Object.assign(handle, {
    /** Adds a plan (of a new hoster unless one is given); limits default as registry's DEFAULT_LIMITS. */
    addProduct(
      terms: Partial<ProductTerms> & Pick<ProductTerms, "pricingModel">,
      status = "active",
      hosterId: string = randomUUID(),
    ): Product {
      const product: Product = {
        productId: randomUUID(),
        hosterId,
        status,
        createdAt: new Date().toISOString(),
        updatedAt: new Date().toISOString(),
        terms: {
          name: "Plan",
          description: "",
          monthlyPriceMicros: 0n,
          includedTokens: 0n,
          inputPricePer1mMicros: 0n,
          outputPricePer1mMicros: 0n,
          overagePricePer1mMicros: 0n,
          rpmLimit: 60n,
          tpmLimit: 100_000n,
          maxConcurrent: 5n,
          maxOutputTokens: 4096n,
          maxContextTokens: 8192n,
          open: false,
          ...terms,
        },
      };
      products.set(product.productId, { product, hosterName: "Test Hoster" });
      return product;
    },
    /** Archives a plan: GetProduct still answers it, with its last terms. */
    archiveProduct(productId: string) {
      products.get(productId)!.product.status = "archived";
    },
    /** Changes a plan's terms in place (a hoster's edit). */
    editProduct(productId: string, terms: Partial<ProductTerms>) {
      const found = products.get(productId)!;
      found.product.terms = { ...found.product.terms!, ...terms };
    },
    /** Forgets a plan, so GetProduct answers not_found (registry never deletes one; billing copes anyway). */
    forgetProduct(productId: string) {
      products.delete(productId);
    },
    /** While set, every call answers service_unavailable. */
    setFailing(value: boolean) {
      failing = value;
    },
  });
}

export type RegistryDouble = Awaited<ReturnType<typeof startRegistryDouble>>;
