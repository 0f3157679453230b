import { describe, expect, it } from "vitest";
import type { AppError } from "@mkt/runtime/errors";
import { CatalogTable, type RouteScope } from "@mkt/proto/registry/v1/registry";
import { OutlierTracker } from "../src/relay/outlier-tracker.ts";
import { RoutingTable } from "../src/routing/routing-table.ts";

const LOCAL = "http://10.0.0.5:8000";
const CLOUD = "https://api.cloud.example/v1";
const ACME = "6f1c0c3e-1a52-4b7c-9a53-5a1b2c3d4e5f";
const OTHER = "0b8e9a47-2f0e-4d0e-8e4b-9c8d7e6f5a4b";

const platform = (modelId: string, provider: "local" | "cloud", modelAlias = "") => ({
  modelId,
  modelAlias,
  provider,
  ownedBy: "platform",
  created: 1_700_000_000n,
  inputPricePer1mMicros: 500_000n,
  outputPricePer1mMicros: 1_500_000n,
  contextWindow: 8192n,
  maxOutputTokensCap: 4096n,
  upstreams: [
    {
      baseUrl: provider === "local" ? LOCAL : CLOUD,
      token: `${provider}-token`,
      upstreamModel: `${modelId}-upstream`,
      trust: "platform",
      key: `${provider} ${provider === "local" ? LOCAL : CLOUD} ${modelId}`,
    },
  ],
});

const hoster = (hosterId: string, status: string, models: Array<[string, string]>, token = "hoster-token") => ({
  hosterId,
  name: `Hoster ${hosterId.slice(0, 4)}`,
  status,
  created: 1_700_000_000n,
  models: models.map(([modelId, modelAlias]) => ({ modelId, modelAlias, contextWindow: 32_768n })),
  endpointUrl: `https://${hosterId.slice(0, 4)}.hoster.example`,
  token,
  upstreamKey: `hoster ${hosterId}`,
  plans: [],
});

const TABLE = CatalogTable.fromPartial({
  version: 42n,
  platformModels: [
    platform("demo-small", "local", "Demo Small"),
    platform("Demo-Large", "local"),
    platform("gpt-4o-mini", "cloud", "Mini"),
  ],
  hosters: [
    hoster(ACME, "healthy", [
      ["llama-3-8b.gguf", "Llama 3 8B"],
      ["qwen2.5-7b", ""],
    ]),
    hoster(OTHER, "unhealthy", [["mistral-7b", ""]]),
  ],
});

const scopeOf = (hosterId: string): RouteScope => ({ subscriptionId: "sub_1", productId: "prod_1", hosterId });

function table(ejected: string[] = [], contents = TABLE): RoutingTable {
  const t = new RoutingTable({ isEjected: (key) => ejected.includes(key) });
  t.apply(contents);
  return t;
}

function refusal(run: () => unknown): AppError {
  try {
    run();
  } catch (err) {
    return err as AppError;
  }
  throw new Error("resolved");
}

describe("RoutingTable.resolve for an account key", () => {
  it("finds an exact id, then an alias, then an id case-insensitively", () => {
    const t = table();
    expect(t.resolve("demo-small", undefined)).toMatchObject({
      modelId: "demo-small",
      provider: "local",
      hosterId: "",
      productId: "",
      inputPricePer1mMicros: 500_000n,
      outputPricePer1mMicros: 1_500_000n,
      contextWindow: 8192n,
      maxOutputTokensCap: 4096n,
    });
    expect(t.resolve("demo SMALL", undefined).modelId).toBe("demo-small");
    expect(t.resolve("demo-large", undefined).modelId).toBe("Demo-Large");
    expect(t.resolve("mini", undefined)).toMatchObject({ modelId: "gpt-4o-mini", provider: "cloud" });
  });

  it("answers `auto` with the first healthy model, local before cloud", () => {
    expect(table().resolve("auto", undefined).modelId).toBe("demo-small");
    expect(table(["local 'x'"]).resolve("AUTO", undefined).modelId).toBe("demo-small");
    const localsEjected = [`local ${LOCAL} demo-small`, `local ${LOCAL} Demo-Large`];
    expect(table(localsEjected).resolve("auto", undefined).modelId).toBe("gpt-4o-mini");
    const everyEjected = [...localsEjected, `cloud ${CLOUD} gpt-4o-mini`];
    expect(refusal(() => table(everyEjected).resolve("auto", undefined))).toMatchObject({
      code: "no_healthy_upstream",
      message: "No healthy server is available for the model `auto`.",
    });
  });

  it("carries kind and max_n to the route, and `auto` is the first healthy model of the kind asked", () => {
    const withEmbed = CatalogTable.fromPartial({
      ...TABLE,
      platformModels: [
        { ...platform("embed-first", "local"), kind: "embedding" },
        { ...platform("demo-small", "local"), maxN: 8n },
      ],
    });
    const t = table([], withEmbed);
    expect(t.resolve("auto", undefined)).toMatchObject({ modelId: "demo-small", kind: "", maxN: 8n });
    expect(t.resolve("auto", undefined, "embedding")).toMatchObject({ modelId: "embed-first", kind: "embedding" });
    // A name resolves whatever its kind: the API asking decides (candidateRoutes) what to answer.
    expect(t.resolve("embed-first", undefined).kind).toBe("embedding");
  });

  it("carries a platform model's cached-input price to its route, absent where none is configured", () => {
    const withCached = CatalogTable.fromPartial({
      ...TABLE,
      platformModels: [
        { ...platform("demo-small", "local"), cachedInputPricePer1mMicros: 50_000n },
        platform("gpt-4o-mini", "cloud"),
      ],
    });
    const t = table([], withCached);
    expect(t.resolve("demo-small", undefined).cachedInputPricePer1mMicros).toBe(50_000n);
    expect(t.resolve("gpt-4o-mini", undefined).cachedInputPricePer1mMicros).toBeUndefined();
  });

  it("counts a model whose every server is ejected as unhealthy", () => {
    const err = refusal(() => table([`local ${LOCAL} demo-small`]).resolve("Demo Small", undefined));
    expect(err).toMatchObject({
      code: "no_healthy_upstream",
      message: "No healthy server is available for the model `demo-small`.",
      headers: { "retry-after": "1" },
    });
  });

  it("never sees hosters' models, and names the param for an unknown model", () => {
    for (const name of ["llama-3-8b.gguf", "Llama 3 8B", "gpt-9"]) {
      expect(refusal(() => table().resolve(name, undefined))).toMatchObject({
        code: "model_not_found",
        param: "model",
        message: `The model \`${name}\` does not exist or you do not have access to it.`,
      });
    }
  });
});

describe("RoutingTable.resolve for a scoped key", () => {
  it("sees its own hoster's models only, priced 0, with the scope's plan and the context window as cap", () => {
    const t = table();
    expect(t.resolve("Llama 3 8B", scopeOf(ACME))).toEqual({
      modelId: "llama-3-8b.gguf",
      provider: "hoster",
      hosterId: ACME,
      productId: "prod_1",
      inputPricePer1mMicros: 0n,
      outputPricePer1mMicros: 0n,
      contextWindow: 32_768n,
      maxOutputTokensCap: 32_768n,
      maxN: 1n,
      kind: "chat",
      open: false,
    });
    expect(t.resolve("QWEN2.5-7B", scopeOf(ACME.toUpperCase())).modelId).toBe("qwen2.5-7b");
    expect(t.resolve("auto", scopeOf(ACME)).modelId).toBe("llama-3-8b.gguf");
    for (const name of ["demo-small", "mistral-7b", "gpt-4o-mini"]) {
      expect(refusal(() => t.resolve(name, scopeOf(ACME))).code, name).toBe("model_not_found");
    }
    // A scope naming no hoster, or one that is gone, sees nothing (auto included).
    expect(refusal(() => t.resolve("auto", scopeOf(""))).code).toBe("model_not_found");
    expect(refusal(() => t.resolve("auto", scopeOf("9d3c2b1a-0000-4000-8000-000000000000"))).code).toBe(
      "model_not_found",
    );
  });

  it("finds the models of an unhealthy, ejected or token-less hoster unhealthy", () => {
    expect(refusal(() => table().resolve("mistral-7b", scopeOf(OTHER))).code).toBe("no_healthy_upstream");
    expect(refusal(() => table().resolve("auto", scopeOf(OTHER))).code).toBe("no_healthy_upstream");
    expect(refusal(() => table([`hoster ${ACME}`]).resolve("qwen2.5-7b", scopeOf(ACME))).code).toBe(
      "no_healthy_upstream",
    );
    const tokenless = CatalogTable.fromPartial({ hosters: [hoster(ACME, "healthy", [["m", ""]], "")] });
    expect(refusal(() => table([], tokenless).resolve("m", scopeOf(ACME))).code).toBe("no_healthy_upstream");
  });
});

describe("RoutingTable.candidatesFor", () => {
  it("lists a platform model's servers in order, ejected ones included", () => {
    const t = table([`local ${LOCAL} demo-small`]);
    expect(t.candidatesFor(t.resolve("Demo-Large", undefined))).toEqual([
      {
        baseUrl: LOCAL,
        token: "local-token",
        upstreamModel: "Demo-Large-upstream",
        trust: "platform",
        key: `local ${LOCAL} Demo-Large`,
      },
    ]);
    const route = table().resolve("demo-small", undefined);
    expect(t.candidatesFor(route)).toHaveLength(1);
    // Another provider's route of the same name is not this model.
    expect(t.candidatesFor({ ...route, provider: "cloud" })).toEqual([]);
  });

  it("gives a hoster route its one server, and none once the hoster is unhealthy or gone", () => {
    const route = table().resolve("llama-3-8b.gguf", scopeOf(ACME));
    expect(table().candidatesFor(route)).toEqual([
      {
        baseUrl: "https://6f1c.hoster.example",
        token: "hoster-token",
        upstreamModel: "llama-3-8b.gguf",
        trust: "hoster",
        key: `hoster ${ACME}`,
      },
    ]);
    const unhealthy = CatalogTable.fromPartial({ hosters: [hoster(ACME, "unhealthy", [["llama-3-8b.gguf", ""]])] });
    expect(table([], unhealthy).candidatesFor(route)).toEqual([]);
    expect(table([], CatalogTable.fromPartial({})).candidatesFor(route)).toEqual([]);
  });
});

describe("RoutingTable before its first table", () => {
  it("makes a request wait for the first table, then refuses it 503 with retry-after", async () => {
    const t = new RoutingTable();
    expect(t.version).toBe(0n);
    await expect(t.ready(20)).rejects.toMatchObject({
      code: "service_unavailable",
      headers: { "retry-after": "1" },
    });
    const waiting = t.ready(5_000);
    setTimeout(() => t.apply(TABLE), 10);
    await waiting;
    expect(t.version).toBe(42n);
    expect(t.resolve("auto", undefined).modelId).toBe("demo-small");
  });
});

describe("a hoster registry's probes find healthy again", () => {
  it("ends this edge's own ejection of it at once, not at the ejection's back-off", () => {
    const outliers = new OutlierTracker({ ejectAfterFailures: 1, backoffMs: 60_000 });
    const table = new RoutingTable(outliers);
    table.apply(TABLE);
    const key = `hoster ${OTHER}`;
    outliers.failed(key);
    expect(outliers.isEjected(key)).toBe(true);
    // A table in which it is still unhealthy changes nothing; the one in which it is healthy ends it.
    table.apply(CatalogTable.fromPartial({ ...TABLE, version: 43n }));
    expect(outliers.isEjected(key)).toBe(true);
    const healthy = TABLE.hosters.map((h) => (h.hosterId === OTHER ? { ...h, status: "healthy" } : h));
    table.apply(CatalogTable.fromPartial({ ...TABLE, version: 44n, hosters: healthy }));
    expect(outliers.isEjected(key)).toBe(false);
    expect(table.resolve("mistral-7b", scopeOf(OTHER)).hosterId).toBe(OTHER);
  });
});
