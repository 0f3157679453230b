import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { InterceptingCall, type Interceptor } from "@grpc/grpc-js";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { createLogger } from "@mkt/runtime/logger";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { startNatsProxy, type NatsProxy } from "@mkt/testkit/nats-proxy";
import { AccountsServiceClient, type RevalidateKeysRequest } from "@mkt/proto/accounts/v1/accounts";
import { startTestAccounts, type TestAccounts } from "../../services/accounts/test/accounts-harness.ts";
import { followKeyRevocations } from "../src/key-revocations.ts";
import { PrincipalCache } from "../src/principal-cache.ts";
import { startPrincipalRevalidation } from "../src/principal-revalidation.ts";

// An edge's principal cache as server.ts wires it (keys.revoked followed, revalidation running)
// against a real accounts, its calls counted by a gRPC interceptor. The TTL is accounts': the
// cache starts at the default and takes accounts' from its replies.
const TTL = 400;
const log = createLogger("principal-revalidation-test", "silent");
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let t: TestAccounts;
let proxy: NatsProxy;
const cleanups: Array<() => Promise<void>> = [];
beforeAll(async () => {
  t = await startTestAccounts({ PRINCIPAL_TTL_MS: String(TTL) });
  proxy = await startNatsProxy();
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});
afterAll(async () => {
  await proxy?.close();
  await t?.close();
});

/** The edge's side: a principal cache following keys.revoked over `natsUrl`, revalidating with accounts. */
async function edgeCache(natsUrl = TEST_NATS_URL, edgeId = "") {
  const calls: string[] = [];
  const revalidated: string[][] = [];
  const counter: Interceptor = (options, nextCall) => {
    const method = options.method_definition.path.split("/").pop()!;
    calls.push(method);
    return new InterceptingCall(nextCall(options), {
      sendMessage(message, next) {
        if (method === "RevalidateKeys") revalidated.push([...(message as RevalidateKeysRequest).keyIds]);
        next(message);
      },
    });
  };
  const edgeTls = (await testCertificates()).tls("edge");
  const client = createClient(AccountsServiceClient, `127.0.0.1:${t.accounts.port}`, edgeTls, {
    interceptors: [counter],
  });
  const accounts = promiseClient(client);
  const nc: NatsConnection = await connect({ servers: natsUrl, reconnectTimeWait: 50, maxReconnectAttempts: -1 });
  const cache = new PrincipalCache({ edgeId });
  const stopFollowing = followKeyRevocations(nc, t.names.keysRevoked, cache, log);
  await nc.flush();
  const stopRevalidating = startPrincipalRevalidation(cache, accounts, log);
  cleanups.push(async () => {
    await stopRevalidating();
    stopFollowing();
    await nc.close();
    client.close();
  });
  const count = (method: string) => calls.filter((m) => m === method).length;
  /** One request's authentication, as the API-key hook does it. */
  const use = (apiKey: string) =>
    cache.get(apiKey, async () => {
      const reply = await accounts.authenticate({ edgeId, apiKey }, { timeoutMs: 5_000 });
      cache.trustFor(Number(reply.principalTtlMs));
      return reply.principal!;
    });
  return { cache, nc, revalidated, count, use };
}

async function keys(n: number) {
  const signUps = await Promise.all(Array.from({ length: n }, () => t.signUp()));
  return signUps.map((s) => ({ apiKey: s.apiKey, keyId: s.key!.keyId, accountId: s.account!.accountId }));
}

/** Uses `apiKey` until it is refused; the ms that took. */
async function msUntilRefused(use: (apiKey: string) => Promise<unknown>, apiKey: string): Promise<number> {
  const start = performance.now();
  for (;;) {
    const refused = await use(apiKey).then(
      () => false,
      (err: unknown) => (expect(err).toMatchObject({ code: "invalid_api_key" }), true),
    );
    if (refused) return performance.now() - start;
    if (performance.now() - start > 10 * TTL) throw new Error("the revoked key was never refused");
    await sleep(10);
  }
}

describe("revalidating cached principals with accounts", () => {
  it("checks every key in use in one call per half TTL, and refuses a key revoked without an announcement within one TTL", async () => {
    const e = await edgeCache();
    const held = await keys(20);
    for (const k of held) await e.use(k.apiKey);
    // Accounts' PRINCIPAL_TTL_MS, from its Authenticate replies (the cache starts at the default).
    expect(e.cache.ttlMs).toBe(TTL);

    const before = e.count("RevalidateKeys");
    const start = performance.now();
    while (performance.now() - start < 5 * TTL) {
      await Promise.all(held.map((k) => e.use(k.apiKey)));
      await sleep(20);
    }
    const elapsed = performance.now() - start;
    const calls = e.count("RevalidateKeys") - before;
    // One call per half TTL (timers may slip on a busy machine, never below one per TTL).
    expect(calls).toBeGreaterThanOrEqual(Math.floor(elapsed / TTL));
    expect(calls).toBeLessThanOrEqual(Math.ceil(elapsed / (TTL / 2)) + 1);
    for (const batch of e.revalidated.slice(-calls)) expect(batch.sort()).toEqual(held.map((k) => k.keyId).sort());
    expect(e.count("Authenticate")).toBe(20); // revalidation kept them all, no lookup again

    // Revoked in accounts' database, with no keys.revoked: only revalidation can tell the edge.
    const [victim, ...others] = held;
    await t.query(`update api_keys set revoked_at = now() where id = $1`, [victim!.keyId]);
    const ms = await msUntilRefused(e.use, victim!.apiKey);
    // At most one TTL − margin past the last check sent before the commit, plus a request's time.
    expect(ms).toBeLessThan(TTL + 150);
    const lookups = e.count("Authenticate");
    await Promise.all(others.map((k) => e.use(k.apiKey)));
    expect(e.count("Authenticate")).toBe(lookups);
  });

  it("acks keys.revoked once the key is dropped, so the revocation answers without waiting out a TTL", async () => {
    const e = await edgeCache(TEST_NATS_URL, "edge_acking");
    const [k] = await keys(1);
    await e.use(k!.apiKey); // Authenticate records this edge as holding the key
    const start = performance.now();
    await t.client.revokeApiKey({ accountId: k!.accountId, keyId: k!.keyId });
    // Accounts' TTL is its default (2 s): without this edge's ack it would wait 2.2 s.
    expect(performance.now() - start).toBeLessThan(1_000);
    const lookups = e.count("Authenticate");
    await expect(e.use(k!.apiKey)).rejects.toMatchObject({ code: "invalid_api_key" });
    expect(e.count("Authenticate")).toBe(lookups + 1); // dropped before the ack: asked again, refused
  });

  it("drops a key no longer in use instead of revalidating it", async () => {
    const e = await edgeCache();
    const [kept, idle] = await keys(2);
    await e.use(kept!.apiKey);
    await e.use(idle!.apiKey);
    const start = performance.now();
    while (performance.now() - start < 3.5 * TTL) {
      await e.use(kept!.apiKey);
      await sleep(20);
    }
    expect(e.cache.size).toBe(1);
    expect(e.revalidated.at(-1)).toEqual([kept!.keyId]);
    expect(e.revalidated.flat()).toContain(idle!.keyId); // it was checked while recently used
  });

  it("serves from memory for one TTL at most while NATS is down, and caches again once it is back", async () => {
    const e = await edgeCache(proxy.url);
    const [k] = await keys(1);
    await e.use(k!.apiKey);
    await sleep(TTL); // revalidated meanwhile: its principal is good for another TTL
    await e.use(k!.apiKey);
    expect(e.count("Authenticate")).toBe(1);

    const statuses: string[] = [];
    void (async () => {
      for await (const s of e.nc.status()) statuses.push(s.type);
    })();
    proxy.cut({ refuse: true });
    while (!statuses.includes("disconnect")) await sleep(5);
    const down = performance.now();
    const servedFromMemoryAt: number[] = [];
    while (performance.now() - down < 2 * TTL) {
      const lookups = e.count("Authenticate");
      const at = performance.now() - down;
      await e.use(k!.apiKey);
      if (e.count("Authenticate") === lookups) servedFromMemoryAt.push(at);
      await sleep(10);
    }
    expect(servedFromMemoryAt.length).toBeGreaterThan(0); // a short outage costs nothing at first
    expect(Math.max(...servedFromMemoryAt)).toBeLessThan(TTL + 20);

    proxy.accept();
    while (!statuses.includes("reconnect")) await sleep(5);
    const lookups = e.count("Authenticate");
    await e.use(k!.apiKey);
    await e.use(k!.apiKey);
    expect(e.count("Authenticate")).toBe(lookups + 1);
  });
});
