import type { ClientReadableStream } from "@grpc/grpc-js";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createClient } from "@mkt/runtime/grpc-client";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { RegistryServiceClient, type CatalogTable, type WatchCatalogResponse } from "@mkt/proto/registry/v1/registry";
import { loadRegistryConfig } from "../src/config.ts";
import { startRegistry, type RegistryHandle } from "../src/server.ts";
import { startHarness, UPSTREAM_TOKEN, waitFor, type Harness } from "./registry-harness.ts";
import { startRealHoster } from "./hoster-servers.ts";

const MODEL = "llama-3-8b.Q4_K_M.gguf";

let h: Harness;
let replicaB: RegistryHandle;
const closers: Array<() => unknown> = [];

beforeAll(async () => {
  h = await startHarness({ HOSTER_PROBE_INTERVAL_MS: "100", HOSTER_UNHEALTHY_AFTER: "1" });
  // A second replica on the same database and NATS, whose probes never run during the test: a
  // change it sends comes from replica A (through catalog.changed).
  replicaB = await startRegistry(loadRegistryConfig({ ...rawEnv(h), HOSTER_PROBE_INTERVAL_MS: "600000" }), h.log);
});
afterAll(async () => {
  for (const close of closers.reverse()) await close();
  await replicaB?.close(1_000);
  await h?.close();
});

/** The environment the harness started registry with, on a fresh port. */
function rawEnv(harness: Harness): Record<string, string> {
  const c = harness.config;
  return {
    ...harnessCerts,
    DATABASE_URL: harness.databaseUrl,
    SECRETS_KEY: harness.secretsKey,
    ACCOUNTS_ADDR: c.ACCOUNTS_ADDR,
    ALLOW_PRIVATE_UPSTREAMS: "true",
    NATS_URL: c.NATS_URL,
    EVENTS_PREFIX: c.EVENTS_PREFIX,
    GRPC_PORT: "0",
    METRICS_PORT: "0",
    LOCAL_MODEL_URL: c.LOCAL_MODEL_URL.join(","),
    LOCAL_MODEL_TOKEN: UPSTREAM_TOKEN,
    LOCAL_MODELS: JSON.stringify(
      c.LOCAL_MODELS.map((m) => ({
        model_id: m.modelId,
        model_alias: m.modelAlias || undefined,
        context_window: Number(m.contextWindow),
        input_price_per_1m_usd: "0.50",
        output_price_per_1m_usd: "1.50",
        upstream_model: m.upstreamModel,
      })),
    ),
  };
}
const harnessCerts = (await testCertificates()).env("registry");

/** Watches a registry as the edge does, keeping every table it sends. */
async function watch(port: number) {
  const certs = await testCertificates();
  const client = createClient(RegistryServiceClient, `127.0.0.1:${port}`, certs.tls("edge"));
  const tables: CatalogTable[] = [];
  const call: ClientReadableStream<WatchCatalogResponse> = client.watchCatalog({});
  call.on("data", (response: WatchCatalogResponse) => tables.push(response.table!));
  call.on("error", () => undefined); // the cancel at the end of the file
  closers.push(() => {
    call.cancel();
    client.close();
  });
  return { tables, latest: () => tables.at(-1) };
}

it("sends the whole table on subscribe: platform models with their servers and prices", async () => {
  const watcher = await watch(h.registry.port);
  const table = await waitFor(watcher.latest, (t) => t !== undefined, 5_000);
  expect(table!.version).toBeGreaterThan(0n);
  const demo = table!.platformModels.find((m) => m.modelId === "demo-small");
  expect(demo).toMatchObject({
    modelAlias: "Demo Small",
    provider: "local",
    ownedBy: "platform",
    inputPricePer1mMicros: 500_000n,
    outputPricePer1mMicros: 1_500_000n,
    contextWindow: 8192n,
    maxOutputTokensCap: 4096n,
  });
  expect(demo!.upstreams).toEqual([
    {
      baseUrl: h.upstream.url,
      token: UPSTREAM_TOKEN,
      upstreamModel: "ok",
      trust: "platform",
      key: `local ${h.upstream.url} demo-small`,
    },
  ]);
  // Configured order is routing order.
  expect(table!.platformModels.map((m) => m.modelId)).toEqual(h.config.LOCAL_MODELS.map((m) => m.modelId));
});

it("a hoster registered, a plan created and a probe's verdict reach watchers of both replicas within a second", async () => {
  const onA = await watch(h.registry.port);
  const onB = await watch(replicaB.port);
  await waitFor(() => onA.tables.length > 0 && onB.tables.length > 0, Boolean, 5_000);

  const server = await startRealHoster({ models: [MODEL] });
  closers.push(() => server.close());
  let at = Date.now();
  const { hoster } = await h.client.registerHoster({
    name: "Table GPUs",
    email: "table@example.com",
    endpointUrl: server.url,
    apiKey: server.token,
    inviteCode: h.accounts.invite(),
    password: "a long enough password",
    clientIp: "203.0.113.9",
    models: [
      {
        modelId: MODEL,
        modelAlias: "Llama",
        contextWindow: 8192n,
        kind: "",
        maxN: 0n,
        canonicalId: "",
        quantization: "",
      },
    ],
  });
  const hosterId = hoster!.hosterId;
  const hosterIn = (t: CatalogTable | undefined) => t?.hosters.find((x) => x.hosterId === hosterId);
  for (const watcher of [onA, onB]) {
    const table = await waitFor(watcher.latest, (t) => hosterIn(t) !== undefined, 1_000);
    expect(hosterIn(table)).toMatchObject({
      name: "Table GPUs",
      status: "healthy",
      endpointUrl: server.url,
      token: server.token,
      upstreamKey: `hoster ${hosterId}`,
      models: [
        {
          modelId: MODEL,
          modelAlias: "Llama",
          contextWindow: 8192n,
          kind: "chat",
          maxN: 1n,
          // The defaults: the model's public name is its model_id, its quantization unknown.
          canonicalId: MODEL,
          quantization: "unknown",
        },
      ],
      plans: [],
    });
  }
  expect(Date.now() - at).toBeLessThan(1_000);

  at = Date.now();
  const { product } = await h.client.createProduct({
    hosterId,
    terms: {
      name: "Starter",
      description: "",
      pricingModel: "payg",
      monthlyPriceMicros: 0n,
      includedTokens: 0n,
      inputPricePer1mMicros: 100_000n,
      outputPricePer1mMicros: 200_000n,
      overagePricePer1mMicros: 0n,
      rpmLimit: 0n,
      tpmLimit: 0n,
      maxConcurrent: 0n,
      maxOutputTokens: 0n,
      maxContextTokens: 0n,
      open: false,
    },
  });
  for (const watcher of [onA, onB]) {
    const table = await waitFor(watcher.latest, (t) => (hosterIn(t)?.plans.length ?? 0) > 0, 1_000);
    expect(hosterIn(table)!.plans[0]).toMatchObject({ productId: product!.productId, status: "active" });
  }
  expect(Date.now() - at).toBeLessThan(1_000);

  // The hoster's server stops; replica A's next probe marks it unhealthy.
  const versionBefore = onB.latest()!.version;
  await server.close();
  for (const watcher of [onA, onB]) {
    const table = await waitFor(watcher.latest, (t) => hosterIn(t)?.status === "unhealthy", 2_000);
    expect(hosterIn(table)?.status).toBe("unhealthy");
  }
  expect(onB.latest()!.version).toBeGreaterThan(versionBefore);
  // A burst is one table: registration, plan and verdict, not one table per announcement echo.
  expect(onB.tables.length).toBeLessThanOrEqual(4);
  expect(h.logLines.join("\n")).not.toContain(server.token);
});
