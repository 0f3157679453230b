import { afterAll, beforeAll, expect, it } from "vitest";
import { createLogger } from "@mkt/runtime/logger";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { loadEdgeConfig } from "../../edge/src/config.ts";
import { FIRST_TABLE_WAIT_MS } from "../../edge/src/chat/candidate-routes.ts";
import { startEdge } from "../../edge/src/server.ts";
import { startRealHoster } from "../../services/registry/test/hoster-servers.ts";
import { apiCall } from "../e2e/api-call.ts";
import { registerHoster, type RegisteredHoster } from "../e2e/hoster-fixture.ts";
import { signUp, startSystem, type RestartableRegistry, type RunningSystem } from "../e2e/system.ts";

// Edges route from the table registry streams them (WatchCatalog), so routing outlives registry:
// while it is down, each edge answers from its last table; once it is back, a change reaches every
// edge within a second. (Chats themselves are still relayed by registry, so they wait for it.)

const OUTAGE_MS = 30_000;

let system: RunningSystem & RestartableRegistry;
let hoster: RegisteredHoster;
let scopedKey: string;
let accountKey: string;

beforeAll(async () => {
  // A hoster found down by one failed probe, and probed five times a second.
  system = await startSystem({ edges: 2, registry: { HOSTER_PROBE_INTERVAL_MS: "200", HOSTER_UNHEALTHY_AFTER: "1" } });
  hoster = await registerHoster(system, { name: "Outage Hoster" });
  const plan = await apiCall(system.url, "POST", "/hosters/products", {
    cookie: hoster.cookie,
    body: { name: "Free", pricing_model: "free" },
  });
  expect(plan.status).toBe(201);
  accountKey = (await signUp(system.url)).apiKey;
  const subscription = await apiCall(system.url, "POST", "/v1/subscriptions", {
    key: accountKey,
    body: { product_id: plan.body.product_id },
  });
  expect(subscription.status).toBe(201);
  scopedKey = subscription.body.api_key as string;
}, 60_000);
afterAll(async () => {
  await system?.close();
  await hoster?.server.close();
});

const chat = (edge: string, key: string, model: string) =>
  apiCall(edge, "POST", "/v1/chat/completions", {
    key,
    body: { model, max_tokens: 5, messages: [{ role: "user", content: "hi" }] },
  });

/** A gauge of the edge's /metrics. */
async function gauge(edge: string, name: string): Promise<number> {
  const text = await (await fetch(`${edge}/metrics`)).text();
  const value = new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1];
  if (value === undefined) throw new Error(`${name} is not exported`);
  return Number(value);
}

/** Polls `check` every 50 ms until it holds; returns how long that took. */
async function within(ms: number, check: () => Promise<boolean>): Promise<number> {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > ms) throw new Error(`not within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return Date.now() - start;
}

const hosterStatus = async () => {
  const { body } = await apiCall(system.url, "GET", "/v1/hosters", { key: accountKey });
  return (body.data as Array<{ hoster_id: string; status: string }>).find((h) => h.hoster_id === hoster.hosterId)
    ?.status;
};

it(
  "while registry is down the edges route and answer from their last table; a change after it returns reaches them within a second",
  async () => {
    for (const edge of system.urls) expect((await chat(edge, scopedKey, hoster.modelId)).status).toBe(200);

    // The hoster's server stops: its probe marks it unhealthy and every edge's table says so.
    const port = Number(new URL(hoster.server.url).port);
    await hoster.server.close();
    await within(5_000, async () => (await hosterStatus()) === "unhealthy");
    for (const edge of system.urls) {
      await within(1_000, async () => (await chat(edge, scopedKey, hoster.modelId)).status === 503);
    }
    const versions = await Promise.all(system.urls.map((edge) => gauge(edge, "mkt_routing_table_version")));

    await system.stopRegistry();
    const downAt = Date.now();
    while (Date.now() - downAt < OUTAGE_MS) {
      for (const edge of system.urls) {
        // Answered from the table, without registry: an unknown model, another hoster's scope...
        const unknown = await chat(edge, accountKey, "no-such-model");
        expect(unknown.status).toBe(404);
        expect(unknown.body.error).toMatchObject({ code: "model_not_found", param: "model" });
        const outOfScope = await chat(edge, scopedKey, "demo-small");
        expect(outOfScope.body.error).toMatchObject({ code: "model_not_found", param: "model" });
        // Warm chats keep answering: the relay is in the edge, its route from the table.
        const warm = await chat(edge, accountKey, "demo-small");
        expect(warm.status, JSON.stringify(warm.body)).toBe(200);
        // ...and the hoster the table last found unhealthy (not "service unavailable").
        const unhealthy = await chat(edge, scopedKey, hoster.modelId);
        expect(unhealthy.status).toBe(503);
        expect(unhealthy.body.error.code).toBe("no_healthy_upstream");
      }
      await new Promise((resolve) => setTimeout(resolve, 2_000));
    }
    for (const [i, edge] of system.urls.entries()) {
      expect(await gauge(edge, "mkt_routing_table_age_seconds")).toBeGreaterThanOrEqual(OUTAGE_MS / 1000);
      expect(await gauge(edge, "mkt_routing_table_version")).toBe(versions[i]);
    }

    // Registry is back: every edge watches it again (a fresh table, so its age starts over).
    await system.restartRegistry();
    for (const edge of system.urls) {
      await within(5_000, async () => (await gauge(edge, "mkt_routing_table_age_seconds")) < 2);
    }
    // A change made now (the hoster's server back, found healthy by a probe) reaches both edges
    // within a second of registry recording it: a stale table would refuse the chat itself.
    const server = await startRealHoster({ models: [hoster.modelId], token: hoster.server.token, port });
    try {
      await within(5_000, async () => (await hosterStatus()) === "healthy");
      for (const edge of system.urls) {
        const took = await within(1_000, async () => (await chat(edge, scopedKey, hoster.modelId)).status === 200);
        expect(took).toBeLessThan(1_000);
      }
    } finally {
      await server.close();
    }
  },
  OUTAGE_MS + 60_000,
);

it("an edge that never received a table holds a chat for 5 s, then answers 503 service_unavailable, never model_not_found", async () => {
  // Registry's address refuses connections: this edge never gets a table.
  const edge = await startEdge(
    loadEdgeConfig({
      ...(await testCertificates()).env("edge"),
      EDGE_ID: "never-tabled-edge",
      HOST: "127.0.0.1",
      PORT: "0",
      NATS_URL: TEST_NATS_URL,
      EVENTS_PREFIX: system.eventsPrefix,
      ACCOUNTS_ADDR: system.grpcAddresses.accounts,
      BILLING_ADDR: system.grpcAddresses.billing,
      REGISTRY_ADDR: "127.0.0.1:1",
      ADMIN_TOKEN: system.adminToken,
    }),
    createLogger("e2e", "silent"),
  );
  try {
    expect((await fetch(`${edge.url}/readyz`)).status).toBe(503);
    const start = Date.now();
    const refused = await chat(edge.url, accountKey, "demo-small");
    expect(Date.now() - start).toBeGreaterThanOrEqual(FIRST_TABLE_WAIT_MS - 50);
    expect(FIRST_TABLE_WAIT_MS).toBe(5_000);
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(refused.body.error.code).toBe("service_unavailable");
  } finally {
    await edge.close();
  }
}, 30_000);
