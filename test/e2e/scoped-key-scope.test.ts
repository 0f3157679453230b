import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";
import { apiCall, type Json } from "./api-call.ts";

/** A subscription's scoped key reaches its own hoster's models and nothing else. */

let system: RunningSystem;
let hosterA: RegisteredHoster;
let hosterB: RegisteredHoster;
let scopedKey: string;
let normalKey: string;

const call = (method: string, path: string, auth: { cookie?: string; key?: string }, body?: unknown) =>
  apiCall(system.url, method, path, { ...auth, body });

beforeAll(async () => {
  system = await startSystem();
  hosterA = await registerHoster(system, { name: "Scope Hoster A" });
  hosterB = await registerHoster(system, { name: "Scope Hoster B" });
  const plan = await call(
    "POST",
    "/hosters/products",
    { cookie: hosterA.cookie },
    { name: "Free", pricing_model: "free" },
  );
  expect(plan.status).toBe(201);
  const customer = await signUp(system.url);
  normalKey = customer.apiKey;
  const subscription = await call(
    "POST",
    "/v1/subscriptions",
    { key: normalKey },
    { product_id: plan.body.product_id },
  );
  expect(subscription.status).toBe(201);
  scopedKey = subscription.body.api_key as string;
});
afterAll(async () => {
  await system?.close();
  await hosterA?.server.close();
  await hosterB?.server.close();
});

const chat = (key: string, model: string) =>
  call("POST", "/v1/chat/completions", { key }, { model, max_tokens: 5, messages: [{ role: "user", content: "hi" }] });

describe("a scoped key", () => {
  it("lists and calls only its hoster's models", async () => {
    const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey: scopedKey, maxRetries: 0 });
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([hosterA.modelId]);
    expect((await chat(scopedKey, hosterA.modelId)).status).toBe(200);
    expect((await chat(scopedKey, "auto")).status).toBe(200);
    // The Responses API is the same chat path, with the same scope.
    const response = await client.responses.create({ model: "auto", input: "hi", max_output_tokens: 5 });
    expect(response.model).toBe(hosterA.modelId);
  });

  it("cannot call another hoster's model or a local model (404, as if they did not exist)", async () => {
    const localModels = await call("GET", "/v1/models", { key: normalKey });
    const localModel = (localModels.body.data as Json[])[0]!.id as string;
    expect((await chat(normalKey, localModel)).status).toBe(200);

    for (const model of [hosterB.modelId, localModel]) {
      const refused = await chat(scopedKey, model);
      expect(refused.status, model).toBe(404);
      expect(refused.body.error).toMatchObject({
        type: "invalid_request_error",
        code: "model_not_found",
        param: "model",
      });
    }
  });

  it("cannot create keys or subscriptions, nor list hosters (403 forbidden)", async () => {
    for (const [method, path, body] of [
      ["POST", "/v1/keys", { name: "escape" }],
      ["GET", "/v1/keys", undefined],
      ["POST", "/v1/subscriptions", { product_id: "00000000-0000-0000-0000-000000000000" }],
      ["GET", "/v1/subscriptions", undefined],
      ["GET", "/v1/hosters", undefined],
    ] as const) {
      const res = await call(method, path, { key: scopedKey }, body);
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(res.body.error).toMatchObject({ type: "permission_error", code: "forbidden" });
    }
  });

  it("a normal key never reaches a hoster's model directly", async () => {
    const refused = await chat(normalKey, hosterA.modelId);
    expect(refused.status).toBe(404);
    expect(refused.body.error).toMatchObject({ code: "model_not_found" });
  });
});
