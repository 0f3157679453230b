import { randomBytes } from "node:crypto";
import OpenAI from "openai";
import { afterAll, beforeAll, expect, it } from "vitest";
import { NATS_USERS, type NatsUser } from "@mkt/runtime/nats-permissions";
import { natsPasswordVariable, renderNatsServerConfig } from "@mkt/runtime/nats-server-config";
import { freshEventsPrefix } from "@mkt/testkit/env";
import { startPrivateNatsServer, type PrivateNatsServer } from "@mkt/testkit/nats-server";
import { signUp, startSystem, waitForUsage, type RunningSystem } from "../e2e/system.ts";

// The whole system, every service connected as its own NATS user to a nats-server started with
// the deployed permissions (renderNatsServerConfig): what the services really publish and
// subscribe to is all in the table, or this breaks (a chat left unbilled, a revoked key served).

const prefix = freshEventsPrefix();
const passwords = Object.fromEntries(NATS_USERS.map((user) => [user, `n${randomBytes(16).toString("hex")}`])) as Record<
  NatsUser,
  string
>;
let nats: PrivateNatsServer;
let system: RunningSystem;

beforeAll(async () => {
  nats = await startPrivateNatsServer({
    config: renderNatsServerConfig(prefix),
    env: Object.fromEntries(NATS_USERS.map((user) => [natsPasswordVariable(user), passwords[user]])),
  });
  const natsFor = (user: NatsUser) => ({
    NATS_URL: nats.url,
    NATS_USER: user,
    NATS_PASSWORD: passwords[user],
    EVENTS_PREFIX: prefix,
  });
  system = await startSystem({
    accounts: natsFor("accounts"),
    billing: natsFor("billing"),
    registry: natsFor("registry"),
    edge: natsFor("edge"),
  });
});
afterAll(async () => {
  await system?.close();
  await nats?.close();
});

const auth = (key: string) => ({ authorization: `Bearer ${key}`, "content-type": "application/json" });

it("bills a chat completion: registry's usage event reaches billing through JetStream", async () => {
  const { apiKey } = await signUp(system.url);
  const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey });
  const completion = await client.chat.completions.create({
    model: "auto",
    messages: [{ role: "user", content: "Hello under permissions." }],
  });
  const usage = await waitForUsage<{ usage_30d: { total_requests: number; total_cost_microdollars: number } }>(
    system.url,
    apiKey,
    (u) => u.usage_30d.total_requests === 1,
  );
  expect(completion.usage!.completion_tokens).toBeGreaterThan(0);
  expect(usage.usage_30d.total_cost_microdollars).toBeGreaterThan(0);
});

it("refuses a revoked key on the next request: accounts' keys.revoked reaches the edge", async () => {
  const { apiKey: owner } = await signUp(system.url);
  const created = await fetch(`${system.url}/v1/keys`, {
    method: "POST",
    headers: auth(owner),
    body: JSON.stringify({ name: "ci" }),
  });
  const key = (await created.json()) as { key_id: string; api_key: string };
  expect((await fetch(`${system.url}/v1/usage`, { headers: auth(key.api_key) })).status).toBe(200);
  const revoked = await fetch(`${system.url}/v1/keys/${key.key_id}`, { method: "DELETE", headers: auth(owner) });
  expect(revoked.status).toBe(200);
  expect((await fetch(`${system.url}/v1/usage`, { headers: auth(key.api_key) })).status).toBe(401);
});
