import { connect, type NatsConnection } from "@nats-io/transport-node";
import { createLogger } from "@mkt/runtime/logger";
import { afterAll, beforeAll, expect, it } from "vitest";
import { CatalogChanged } from "@mkt/proto/events/v1/events";
import { Route } from "@mkt/proto/registry/v1/registry";
import { eventNames } from "@mkt/runtime/nats";
import { freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { startNatsProxy, type NatsProxy } from "@mkt/testkit/nats-proxy";
import { followCatalogChanges } from "../src/catalog-changes.ts";
import { RouteCache } from "../src/chat/route-cache.ts";

// The edge reaches NATS through this proxy, so the test can cut its connection (and only its own).
let proxy: NatsProxy;
let publisher: NatsConnection;
const subject = eventNames(freshEventsPrefix()).catalogChanged;

beforeAll(async () => {
  proxy = await startNatsProxy();
  publisher = await connect({ servers: TEST_NATS_URL });
});
afterAll(async () => {
  await publisher.drain();
  await proxy.close();
});

const waitUntil = async (done: () => boolean) => {
  for (let i = 0; i < 200 && !done(); i++) await new Promise((r) => setTimeout(r, 10));
  expect(done()).toBe(true);
};

it("drops the announced hoster's routes, and caches nothing while NATS is disconnected", async () => {
  const nc = await connect({ servers: proxy.url, reconnectTimeWait: 100, maxReconnectAttempts: -1 });
  const cache = new RouteCache(60_000);
  const stop = followCatalogChanges(nc, subject, cache, createLogger("catalog-changes-test", "silent"));
  await nc.flush();
  try {
    let lookups = 0;
    const scope = { subscriptionId: "s", productId: "p", hosterId: "h1" };
    const get = () => cache.get("m", scope, async () => (lookups++, Route.fromPartial({ modelId: "m" })));
    await get();
    await get();
    expect(lookups).toBe(1);

    publisher.publish(subject, CatalogChanged.encode({ hosterId: "h2" }).finish());
    publisher.publish(subject, CatalogChanged.encode({ hosterId: "h1" }).finish());
    await publisher.flush();
    await waitUntil(() => (void get(), lookups === 2));

    const statuses: string[] = [];
    void (async () => {
      for await (const s of nc.status()) statuses.push(s.type);
    })();
    proxy.cut(); // the connection drops; the proxy still accepts, so it comes back
    await waitUntil(() => statuses.includes("disconnect"));
    const before = lookups;
    await get();
    await get();
    expect(lookups).toBe(before + 2); // every call asked registry: nothing was cached meanwhile

    await waitUntil(() => statuses.includes("reconnect"));
    await get();
    await get();
    expect(lookups).toBe(before + 3); // caching again once the subscription is back
  } finally {
    stop();
    await nc.close();
  }
});
