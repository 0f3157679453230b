import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ServiceError } from "@grpc/grpc-js";
import { AppError } from "@mkt/runtime/errors";
import { HosterModel, ProductTerms, type Product, type ProductPatch } from "@mkt/proto/registry/v1/registry";
import { MAX_ACTIVE_PRODUCTS } from "../src/products/product-handlers.ts";
import { startHarness, waitFor, type Harness } from "./registry-harness.ts";
import { startRealHoster } from "./hoster-servers.ts";

const MODEL = "llama-3-8b.Q4_K_M.gguf";
const NO_SUCH_ID = "00000000-0000-4000-8000-000000000000";

let h: Harness;
const servers: Array<{ close(): Promise<void> }> = [];
let hosterA: string;
let hosterB: string;

let registered = 0;
async function registerHoster(name: string): Promise<string> {
  const server = await startRealHoster({ models: [MODEL] });
  servers.push(server);
  const { hoster } = await h.client.registerHoster({
    name,
    email: `plans${++registered}@example.com`,
    endpointUrl: server.url,
    apiKey: server.token,
    inviteCode: h.accounts.invite(),
    password: "",
    clientIp: "203.0.113.9",
    models: [HosterModel.fromPartial({ modelId: MODEL, contextWindow: 8192n })],
  });
  return hoster!.hosterId;
}

beforeAll(async () => {
  h = await startHarness();
  hosterA = await registerHoster("Hoster A");
  hosterB = await registerHoster("Hoster B");
});
afterAll(async () => {
  for (const server of servers) await server.close();
  await h.close();
});

const terms = (t: Partial<ProductTerms>) => ProductTerms.fromPartial({ name: "Plan", ...t });

const PLANS = {
  free: terms({ name: "Free tier", pricingModel: "free" }),
  payg: terms({
    name: "Pay as you go",
    pricingModel: "payg",
    inputPricePer1mMicros: 200_000n,
    outputPricePer1mMicros: 600_000n,
  }),
  subscription: terms({
    name: "Monthly",
    pricingModel: "subscription",
    monthlyPriceMicros: 9_990_000n,
    includedTokens: 5_000_000n,
  }),
  subscription_overage: terms({
    name: "Monthly plus",
    pricingModel: "subscription_overage",
    monthlyPriceMicros: 19_000_000n,
    includedTokens: 10_000_000n,
    overagePricePer1mMicros: 1_000_000n,
  }),
};

const create = async (t: ProductTerms, hosterId = hosterA) =>
  (await h.client.createProduct({ hosterId, terms: t })).product!;

/** The AppError a call fails with. */
async function refusal(call: Promise<unknown>): Promise<AppError> {
  try {
    await call;
  } catch (err) {
    return AppError.fromGrpc(err as ServiceError);
  }
  throw new Error("call unexpectedly succeeded");
}

const update = (productId: string, patch: ProductPatch, hosterId = hosterA) =>
  h.client.updateProduct({ hosterId, productId, patch });

describe("CreateProduct", () => {
  it.each(Object.entries(PLANS))("creates a %s plan with the default limits", async (_kind, planTerms) => {
    const product = await create(planTerms);
    expect(product).toMatchObject({
      hosterId: hosterA,
      status: "active",
      terms: {
        ...planTerms,
        rpmLimit: 60n,
        tpmLimit: 100_000n,
        maxConcurrent: 5n,
        maxOutputTokens: 4096n,
        maxContextTokens: 8192n,
      },
    });
    expect(product.productId).toMatch(/^[0-9a-f-]{36}$/);
    expect(Date.parse(product.createdAt)).not.toBeNaN();
    expect(product.updatedAt).toBe(product.createdAt);

    const got = await h.client.getProduct({ productId: product.productId });
    expect(got).toEqual({ product, hosterName: "Hoster A", hosterStatus: "healthy" });
  });

  it("keeps limits that are given and trims the text", async () => {
    const product = await create(
      terms({
        name: "  Pro  ",
        description: " For teams. ",
        pricingModel: "free",
        rpmLimit: 10n,
        tpmLimit: 20_000n,
        maxConcurrent: 2n,
        maxOutputTokens: 1024n,
        maxContextTokens: 32_768n,
      }),
    );
    expect(product.terms).toMatchObject({
      name: "Pro",
      description: "For teams.",
      rpmLimit: 10n,
      tpmLimit: 20_000n,
      maxConcurrent: 2n,
      maxOutputTokens: 1024n,
      maxContextTokens: 32_768n,
    });
  });

  it("accepts a payg plan that charges only output tokens", async () => {
    const product = await create(terms({ pricingModel: "payg", outputPricePer1mMicros: 1n }));
    expect(product.terms).toMatchObject({ inputPricePer1mMicros: 0n, outputPricePer1mMicros: 1n });
  });

  const cases: Array<[string, Partial<ProductTerms>, string]> = [
    ["no name", { name: "  ", pricingModel: "free" }, "name"],
    ["a 101-character name", { name: "x".repeat(101), pricingModel: "free" }, "name"],
    ["a name with a newline", { name: "a\nb", pricingModel: "free" }, "name"],
    ["a 1001-character description", { description: "d".repeat(1001), pricingModel: "free" }, "description"],
    ["no pricing model", {}, "pricing_model"],
    ["an unknown pricing model", { pricingModel: "lifetime" }, "pricing_model"],
    ["a subscription without a monthly price", { ...PLANS.subscription, monthlyPriceMicros: 0n }, "monthly_price_usd"],
    ["a subscription without included tokens", { ...PLANS.subscription, includedTokens: 0n }, "included_tokens"],
    [
      "an overage plan without an overage price",
      { ...PLANS.subscription_overage, overagePricePer1mMicros: 0n },
      "overage_price_per_1m_usd",
    ],
    ["a payg plan without prices", { pricingModel: "payg" }, "input_price_per_1m_usd"],
    ["a monthly price on a payg plan", { ...PLANS.payg, monthlyPriceMicros: 1_000_000n }, "monthly_price_usd"],
    ["included tokens on a free plan", { pricingModel: "free", includedTokens: 1000n }, "included_tokens"],
    [
      "a per-1M price on a subscription",
      { ...PLANS.subscription, inputPricePer1mMicros: 5n },
      "input_price_per_1m_usd",
    ],
    [
      "an overage price on a subscription",
      { ...PLANS.subscription, overagePricePer1mMicros: 5n },
      "overage_price_per_1m_usd",
    ],
    ["a negative price", { ...PLANS.payg, inputPricePer1mMicros: -1n }, "input_price_per_1m_usd"],
    [
      "a monthly price over 10,000 USD",
      { ...PLANS.subscription, monthlyPriceMicros: 10_000_000_001n },
      "monthly_price_usd",
    ],
    [
      "a per-1M price over 1,000 USD",
      { ...PLANS.payg, outputPricePer1mMicros: 1_000_000_001n },
      "output_price_per_1m_usd",
    ],
    ["absurd included tokens", { ...PLANS.subscription, includedTokens: 10n ** 15n }, "included_tokens"],
    ["a negative rpm limit", { pricingModel: "free", rpmLimit: -5n }, "rpm_limit"],
    ["an rpm limit over 100,000", { pricingModel: "free", rpmLimit: 100_001n }, "rpm_limit"],
    ["a tpm limit over 100M", { pricingModel: "free", tpmLimit: 100_000_001n }, "tpm_limit"],
    ["max_concurrent over 1,000", { pricingModel: "free", maxConcurrent: 1001n }, "max_concurrent"],
    ["max_output_tokens over 1M", { pricingModel: "free", maxOutputTokens: 1_000_001n }, "max_output_tokens"],
    ["max_context_tokens over 10M", { pricingModel: "free", maxContextTokens: 10_000_001n }, "max_context_tokens"],
  ];
  it.each(cases)("refuses %s, naming the field", async (_what, t, param) => {
    const before = (await h.client.listProducts({ hosterId: hosterB })).products.length;
    const err = await refusal(h.client.createProduct({ hosterId: hosterB, terms: terms(t) }));
    expect(err).toMatchObject({ code: "invalid_request", param });
    expect(err.httpStatus).toBe(400);
    expect((await h.client.listProducts({ hosterId: hosterB })).products).toHaveLength(before);
  });

  it("refuses a hoster that does not exist", async () => {
    for (const hosterId of [NO_SUCH_ID, "not-a-uuid"]) {
      const err = await refusal(h.client.createProduct({ hosterId, terms: PLANS.free }));
      expect(err.code).toBe("not_found");
    }
  });

  it(`limits a hoster to ${MAX_ACTIVE_PRODUCTS} active plans`, async () => {
    const hosterId = await registerHoster("Busy Hoster");
    const made: Product[] = [];
    for (let i = 0; i < MAX_ACTIVE_PRODUCTS; i++) made.push(await create(terms({ pricingModel: "free" }), hosterId));
    const err = await refusal(h.client.createProduct({ hosterId, terms: PLANS.free }));
    expect(err.code).toBe("invalid_request");
    expect(err.message).toContain("archive one first");
    await h.client.archiveProduct({ hosterId, productId: made[0]!.productId });
    await create(PLANS.free, hosterId);
  });
});

describe("open plans", () => {
  it("opens a payg or a free plan to every account key, and refuses to open one with a monthly fee", async () => {
    for (const plan of [PLANS.payg, PLANS.free]) {
      const product = await create({ ...plan, open: true });
      expect(product.terms).toMatchObject({ pricingModel: plan.pricingModel, open: true });
      expect((await h.client.getProduct({ productId: product.productId })).product!.terms!.open).toBe(true);
    }
    for (const plan of [PLANS.subscription, PLANS.subscription_overage]) {
      const err = await refusal(create({ ...plan, open: true }));
      expect(err).toMatchObject({ code: "invalid_request", param: "open" });
      expect(err.message).toContain("Only payg and free plans can be open");
    }
    // Not open unless asked.
    expect((await create(PLANS.payg)).terms!.open).toBe(false);
  });

  it("opens and closes a plan by a patch; a subscription plan stays closed", async () => {
    const payg = await create(PLANS.payg);
    const { product: opened } = await update(payg.productId, { open: true });
    expect(opened!.terms).toEqual({ ...payg.terms, open: true });
    const { product: closed } = await update(payg.productId, { open: false });
    expect(closed!.terms!.open).toBe(false);

    const monthly = await create(PLANS.subscription);
    const err = await refusal(update(monthly.productId, { open: true }));
    expect(err).toMatchObject({ code: "invalid_request", param: "open" });
    expect((await h.client.getProduct({ productId: monthly.productId })).product).toEqual(monthly);
  });
});

describe("cached-input prices", () => {
  const stored = async (productId: string) =>
    (await h.client.getProduct({ productId })).product!.terms!.cachedInputPricePer1mMicros;

  it("keeps a payg or overage plan's cached price, an explicit 0 as 0 and an absent one absent", async () => {
    const payg = await create({ ...PLANS.payg, cachedInputPricePer1mMicros: 20_000n });
    expect(payg.terms!.cachedInputPricePer1mMicros).toBe(20_000n);
    const overage = await create({ ...PLANS.subscription_overage, cachedInputPricePer1mMicros: 100_000n });
    expect(await stored(overage.productId)).toBe(100_000n);
    // At the price it discounts: allowed (cached tokens then cost what fresh ones do).
    const atInput = await create({ ...PLANS.payg, cachedInputPricePer1mMicros: PLANS.payg.inputPricePer1mMicros });
    expect(await stored(atInput.productId)).toBe(200_000n);

    const zero = await create({ ...PLANS.payg, cachedInputPricePer1mMicros: 0n });
    expect(await stored(zero.productId)).toBe(0n);
    const absent = await create(PLANS.payg);
    expect(await stored(absent.productId)).toBeUndefined();
    // Every view of the plan carries it as stored.
    const own = (await h.client.listProducts({ hosterId: hosterA })).products;
    const listed = (await h.client.listHosters({})).hosters.find((x) => x.hosterId === hosterA)!.plans;
    for (const plans of [own, listed]) {
      const price = (id: string) => plans.find((p) => p.productId === id)!.terms!.cachedInputPricePer1mMicros;
      expect([price(payg.productId), price(zero.productId), price(absent.productId)]).toEqual([20_000n, 0n, undefined]);
    }
  });

  const refusals: Array<[string, Partial<ProductTerms>]> = [
    ["above a payg plan's input price", { ...PLANS.payg, cachedInputPricePer1mMicros: 200_001n }],
    [
      "on a payg plan that charges only output tokens",
      { pricingModel: "payg", outputPricePer1mMicros: 1n, cachedInputPricePer1mMicros: 1n },
    ],
    [
      "above an overage plan's overage price",
      { ...PLANS.subscription_overage, cachedInputPricePer1mMicros: 1_000_001n },
    ],
    ["on a free plan", { ...PLANS.free, cachedInputPricePer1mMicros: 0n }],
    ["on a subscription plan", { ...PLANS.subscription, cachedInputPricePer1mMicros: 1n }],
    ["when negative", { ...PLANS.payg, cachedInputPricePer1mMicros: -1n }],
  ];
  it.each(refusals)("refuses a cached price %s, naming it", async (_what, t) => {
    const err = await refusal(h.client.createProduct({ hosterId: hosterB, terms: terms(t) }));
    expect(err).toMatchObject({ code: "invalid_request", param: "cached_input_price_per_1m_usd" });
    expect(err.httpStatus).toBe(400);
  });

  it("refuses a patch that lowers the input price below the cached price; both lowered together pass", async () => {
    const product = await create({ ...PLANS.payg, cachedInputPricePer1mMicros: 150_000n });
    const err = await refusal(update(product.productId, { inputPricePer1mMicros: 100_000n }));
    expect(err).toMatchObject({ code: "invalid_request", param: "cached_input_price_per_1m_usd" });
    expect(err.message).toContain("input_price_per_1m_usd");
    expect((await h.client.getProduct({ productId: product.productId })).product).toEqual(product);

    const { product: lowered } = await update(product.productId, {
      inputPricePer1mMicros: 100_000n,
      cachedInputPricePer1mMicros: 10_000n,
    });
    expect(lowered!.terms).toMatchObject({ inputPricePer1mMicros: 100_000n, cachedInputPricePer1mMicros: 10_000n });
    // A patch that leaves it out keeps it; one that sets it to 0 keeps the 0.
    const { product: renamed } = await update(product.productId, { name: "Cheaper" });
    expect(renamed!.terms!.cachedInputPricePer1mMicros).toBe(10_000n);
    await update(product.productId, { cachedInputPricePer1mMicros: 0n });
    expect(await stored(product.productId)).toBe(0n);

    // The same on an overage plan's overage price.
    const overage = await create({ ...PLANS.subscription_overage, cachedInputPricePer1mMicros: 500_000n });
    const overageErr = await refusal(update(overage.productId, { overagePricePer1mMicros: 400_000n }));
    expect(overageErr).toMatchObject({ code: "invalid_request", param: "cached_input_price_per_1m_usd" });
    expect(overageErr.message).toContain("overage_price_per_1m_usd");
  });

  it("adds a cached price to a plan by a patch, and refuses one on a subscription plan", async () => {
    const payg = await create(PLANS.payg);
    const { product } = await update(payg.productId, { cachedInputPricePer1mMicros: 50_000n });
    expect(product!.terms).toEqual({ ...payg.terms, cachedInputPricePer1mMicros: 50_000n });
    const monthly = await create(PLANS.subscription);
    const err = await refusal(update(monthly.productId, { cachedInputPricePer1mMicros: 0n }));
    expect(err).toMatchObject({ code: "invalid_request", param: "cached_input_price_per_1m_usd" });
    expect(await stored(monthly.productId)).toBeUndefined();
  });
});

describe("UpdateProduct", () => {
  it("applies the given fields and keeps the others", async () => {
    const product = await create(PLANS.subscription_overage);
    await new Promise((r) => setTimeout(r, 5));
    const { product: updated } = await update(product.productId, {
      name: "Monthly plus v2",
      monthlyPriceMicros: 25_000_000n,
      rpmLimit: 120n,
    });
    expect(updated).toMatchObject({
      productId: product.productId,
      status: "active",
      createdAt: product.createdAt,
      terms: { ...product.terms, name: "Monthly plus v2", monthlyPriceMicros: 25_000_000n, rpmLimit: 120n },
    });
    expect(Date.parse(updated!.updatedAt)).toBeGreaterThan(Date.parse(product.updatedAt));
    expect((await h.client.getProduct({ productId: product.productId })).product).toEqual(updated);

    // A limit set to 0 goes back to its default; a patch that changes nothing writes nothing.
    const { product: reset } = await update(product.productId, { rpmLimit: 0n });
    expect(reset!.terms!.rpmLimit).toBe(60n);
    const { product: same } = await update(product.productId, { rpmLimit: 60n });
    expect(same).toEqual(reset);
  });

  it("refuses a change that leaves an invalid plan, and changes nothing", async () => {
    const product = await create(PLANS.subscription);
    for (const [patch, param] of [
      [{ monthlyPriceMicros: 0n }, "monthly_price_usd"],
      [{ overagePricePer1mMicros: 1_000n }, "overage_price_per_1m_usd"],
      [{ name: "" }, "name"],
      [{ maxConcurrent: 5000n }, "max_concurrent"],
    ] as Array<[ProductPatch, string]>) {
      const err = await refusal(update(product.productId, patch));
      expect(err).toMatchObject({ code: "invalid_request", param });
    }
    expect((await h.client.getProduct({ productId: product.productId })).product).toEqual(product);
  });

  it("answers not_found for another hoster's plan, an unknown or a malformed id", async () => {
    const product = await create(PLANS.payg);
    for (const [hosterId, productId] of [
      [hosterB, product.productId],
      [hosterA, NO_SUCH_ID],
      [hosterA, "nope"],
    ] as const) {
      const err = await refusal(update(productId, { name: "mine now" }, hosterId));
      expect(err).toMatchObject({ code: "not_found", message: "No such product.", param: "product_id" });
    }
    expect((await h.client.getProduct({ productId: product.productId })).product).toEqual(product);
  });
});

describe("ArchiveProduct", () => {
  it("archives idempotently, hides the plan from ListHosters and freezes it", async () => {
    const keep = await create(terms({ name: "Stays", pricingModel: "free" }));
    const product = await create(PLANS.subscription);
    const plansOfA = async () =>
      (await h.client.listHosters({})).hosters.find((x) => x.hosterId === hosterA)!.plans.map((p) => p.productId);
    expect(await plansOfA()).toEqual(expect.arrayContaining([keep.productId, product.productId]));

    const { product: archived } = await h.client.archiveProduct({ hosterId: hosterA, productId: product.productId });
    expect(archived).toMatchObject({ productId: product.productId, status: "archived", terms: product.terms });
    const { product: again } = await h.client.archiveProduct({ hosterId: hosterA, productId: product.productId });
    expect(again).toEqual(archived);

    expect(await plansOfA()).toContain(keep.productId);
    expect(await plansOfA()).not.toContain(product.productId);
    // The hoster still sees it, and so does the subscription saga (existing subscribers keep it).
    const own = (await h.client.listProducts({ hosterId: hosterA })).products;
    expect(own.find((p) => p.productId === product.productId)).toEqual(archived);
    expect((await h.client.getProduct({ productId: product.productId })).product).toEqual(archived);

    const err = await refusal(update(product.productId, { name: "Revived" }));
    expect(err).toMatchObject({ code: "invalid_request", param: "product_id" });
  });

  it("announces catalog.changed for the hoster after each change, and not for a change that changes nothing", async () => {
    const announced = () => h.catalogChanges.filter((id) => id === hosterA).length;
    const before = announced();
    const product = await create(PLANS.free); // 1
    await update(product.productId, { name: product.terms!.name }); // same terms: nothing
    await h.client.archiveProduct({ hosterId: hosterA, productId: product.productId }); // 2
    await h.client.archiveProduct({ hosterId: hosterA, productId: product.productId }); // already archived: nothing
    await update((await create(PLANS.free)).productId, { name: "Renamed" }); // 3 and 4
    await waitFor(announced, (n) => n >= before + 4);
    await new Promise((r) => setTimeout(r, 50)); // any extra announcement would be in by now
    expect(announced()).toBe(before + 4);
  });

  it("answers not_found for another hoster's plan", async () => {
    const product = await create(PLANS.free);
    const err = await refusal(h.client.archiveProduct({ hosterId: hosterB, productId: product.productId }));
    expect(err).toMatchObject({ code: "not_found", message: "No such product." });
    expect((await h.client.getProduct({ productId: product.productId })).product!.status).toBe("active");
  });
});

describe("ListProducts, GetProduct and ListHosters", () => {
  it("shows each hoster only its own plans, oldest first, and the public list its active ones", async () => {
    const first = await create(terms({ name: "B first", pricingModel: "free" }), hosterB);
    const second = await create(PLANS.payg, hosterB);
    const own = (await h.client.listProducts({ hosterId: hosterB })).products;
    expect(own.every((p) => p.hosterId === hosterB)).toBe(true);
    const ids = own.map((p) => p.productId);
    expect(ids.indexOf(first.productId)).toBeLessThan(ids.indexOf(second.productId));
    expect((await h.client.listProducts({ hosterId: hosterA })).products.map((p) => p.productId)).not.toContain(
      first.productId,
    );

    const listed = (await h.client.listHosters({})).hosters.find((x) => x.hosterId === hosterB)!;
    expect(listed.plans.map((p) => p.productId)).toEqual(
      own.filter((p) => p.status === "active").map((p) => p.productId),
    );
    // GetHoster leaves plans out (the hoster's own list is ListProducts).
    expect((await h.client.getHoster({ hosterId: hosterB })).hoster!.plans).toEqual([]);
  });

  it("answers not_found for an unknown product", async () => {
    for (const productId of [NO_SUCH_ID, "", "x'; drop table products; --"]) {
      expect((await refusal(h.client.getProduct({ productId }))).code).toBe("not_found");
    }
  });
});
