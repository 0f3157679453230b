import { randomBytes, randomUUID } from "node:crypto";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { SecretBox } from "@mkt/runtime/secret-box";
import { buildCatalogTable } from "../src/catalog/catalog-table.ts";
import { hosterCatalog } from "../src/catalog/hoster-catalog.ts";
import type { RoutableHoster } from "../src/hosters/hoster-store.ts";

const box = new SecretBox(randomBytes(32));
const TOKEN = "hoster-token-catalog-test";

/** A hoster table of one row whose reads are counted; `row` may be changed between reads. */
function fakeStore(row: RoutableHoster) {
  const store = {
    row: row as RoutableHoster | undefined,
    reads: 0,
    fail: false,
    async routable(id: string) {
      store.reads++;
      await new Promise((resolve) => setTimeout(resolve, 5));
      if (store.fail) throw new Error("database down");
      return store.row?.id === id ? { ...store.row } : undefined;
    },
  };
  return store;
}

function hoster(overrides: Partial<RoutableHoster> = {}): RoutableHoster {
  const id = randomUUID();
  return {
    id,
    name: "Acme GPUs",
    endpointUrl: "http://127.0.0.1:9/base",
    apiKeySealed: box.seal(TOKEN, `hoster:${id}:api_key`),
    status: "healthy",
    createdAt: new Date("2026-11-01T00:00:00Z"),
    models: [
      {
        modelId: "m-1",
        modelAlias: "Model One",
        contextWindow: 4096n,
        kind: "chat",
        maxN: 1n,
        canonicalId: "",
        quantization: "",
      },
    ],
    ...overrides,
  };
}

function setup(row: RoutableHoster) {
  let now = 1_000;
  const store = fakeStore(row);
  const catalog = hosterCatalog({ store, cacheTtlMs: 100, log: pino({ level: "silent" }), now: () => now });
  const scope = { subscriptionId: randomUUID(), productId: randomUUID(), hosterId: row.id };
  return { store, catalog, scope, advance: (ms: number) => (now += ms) };
}

/** The routing table built from one hoster row (no plans, no platform models). */
const tableOf = (row: RoutableHoster) =>
  buildCatalogTable({
    platformModels: [],
    hosters: { allRoutable: async () => [row] },
    products: { activeByHoster: async () => new Map() },
    minutes: { stats: async () => new Map() },
    verification: { verdicts: async () => new Map() },
    clock: () => new Date(),
    box,
    log: pino({ level: "silent" }),
  });

describe("hosterCatalog", () => {
  it("gives normal keys nothing and reads nothing for them", async () => {
    const { catalog, store } = setup(hoster());
    expect(await catalog.models(undefined)).toEqual([]);
    expect(await catalog.models({ subscriptionId: "", productId: "", hosterId: "" })).toEqual([]);
    expect(store.reads).toBe(0);
  });

  it("reuses a hoster row within the TTL, with concurrent misses sharing one read", async () => {
    const { catalog, store, scope, advance } = setup(hoster());
    await Promise.all([catalog.models(scope), catalog.models(scope), catalog.models(scope)]);
    expect(store.reads).toBe(1);
    advance(99);
    await catalog.models(scope);
    expect(store.reads).toBe(1);
    advance(1);
    await catalog.models(scope);
    expect(store.reads).toBe(2);
  });

  it("sees a changed row once the TTL has passed", async () => {
    const row = hoster();
    const { catalog, store, scope, advance } = setup(row);
    expect((await catalog.models(scope))[0]?.ownedBy).toBe("Acme GPUs");
    store.row = { ...row, name: "Acme GPUs Renamed" };
    advance(100);
    expect((await catalog.models(scope))[0]?.ownedBy).toBe("Acme GPUs Renamed");
  });

  it("does not remember a failed read", async () => {
    const { catalog, store, scope } = setup(hoster());
    store.fail = true;
    await expect(catalog.models(scope)).rejects.toThrow("database down");
    store.fail = false;
    expect(await catalog.models(scope)).toHaveLength(1);
    expect(store.reads).toBe(2);
  });

  it("never queries for a malformed hoster id", async () => {
    const { catalog, store, scope } = setup(hoster());
    expect(await catalog.models({ ...scope, hosterId: "h_1' or 1=1" })).toEqual([]);
    expect(await catalog.models({ ...scope, hosterId: "not-a-uuid" })).toEqual([]);
    expect(store.reads).toBe(0);
  });
});

describe("the routing table's hosters", () => {
  it("carry the opened token for the edges' calls, with the hoster's ejection key", async () => {
    const row = hoster();
    const [entry] = (await tableOf(row)).hosters;
    expect(entry).toMatchObject({
      hosterId: row.id,
      endpointUrl: "http://127.0.0.1:9/base",
      token: TOKEN,
      upstreamKey: `hoster ${row.id}`,
      status: "healthy",
    });
  });

  it("treat a token sealed for another row as no usable server, without throwing", async () => {
    const row = hoster();
    const [entry] = (await tableOf({ ...row, apiKeySealed: box.seal(TOKEN, `hoster:${randomUUID()}:api_key`) }))
      .hosters;
    expect(entry!.token).toBe("");
  });
});
