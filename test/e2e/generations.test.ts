import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REQUEST_CHARGE_SQL } from "../../services/billing/test/billing-harness.ts";
import { openBillingDb, type BillingDb } from "./billing-db.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Our ids on every answer (`chatcmpl-<request id>`) and GET /v1/generations/{id},
// through the whole system with the official client and plain fetch.

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

let system: RunningSystem;
let db: BillingDb;
let apiKey: string;
let client: OpenAI;
beforeAll(async () => {
  system = await startSystem();
  db = await openBillingDb(system.databaseUrl);
  ({ apiKey } = await signUp(system.url));
  client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey });
});
afterAll(async () => {
  await db?.close();
  await system?.close();
});

const getGeneration = async (id: string, key = apiKey) => {
  const res = await fetch(`${system.url}/v1/generations/${id}`, { headers: { authorization: `Bearer ${key}` } });
  return { status: res.status, body: (await res.json()) as Json };
};

/** Polls until the request has settled (about a second after its answer ended) and returns it. */
async function settledGeneration(id: string): Promise<Json> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const { status, body } = await getGeneration(id);
    if (status === 200) return body;
    expect(status).toBe(404); // not settled yet
    if (Date.now() > deadline) throw new Error(`${id} never settled`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** What the ledger charged the customer for the request: its record's cost, in its batch entry's customer leg (REQUEST_CHARGE_SQL). */
const postedChargeMicros = (requestId: string) => db.figure(REQUEST_CHARGE_SQL, [requestId]);

describe("the id of an answer is ours", () => {
  it("a non-streamed completion's id is chatcmpl-<x-request-id>", async () => {
    const { data, response } = await client.chat.completions
      .create({ model: "auto", messages: [{ role: "user", content: "Name a colour." }], max_tokens: 12 })
      .withResponse();
    expect(data.id).toBe(`chatcmpl-${response.headers.get("x-request-id")}`);
  });

  it("every chunk of a stream, the usage chunk too, carries chatcmpl-<x-request-id>", async () => {
    const { data: stream, response } = await client.chat.completions
      .create({
        model: "demo-small",
        messages: [{ role: "user", content: "Stream a few words." }],
        stream: true,
        stream_options: { include_usage: true },
      })
      .withResponse();
    const ids = new Set<string>();
    let chunks = 0;
    for await (const chunk of stream) {
      ids.add(chunk.id);
      chunks++;
    }
    expect(chunks).toBeGreaterThan(2);
    expect([...ids]).toEqual([`chatcmpl-${response.headers.get("x-request-id")}`]);
  });
});

describe("GET /v1/generations/{id}", () => {
  it("returns the caller's request by its completion id or its request id, with the cost the ledger posted", async () => {
    const { data: completion, response } = await client.chat.completions
      .create({ model: "auto", messages: [{ role: "user", content: "Tell me about generations." }] })
      .withResponse();
    const requestId = response.headers.get("x-request-id")!;
    const generation = await settledGeneration(completion.id);
    expect(generation).toMatchObject({
      id: completion.id,
      object: "generation",
      request_id: requestId,
      model: "demo-small",
      provider: "local",
      hoster_id: null,
      input_tokens: completion.usage!.prompt_tokens,
      output_tokens: completion.usage!.completion_tokens,
      total_tokens: completion.usage!.total_tokens,
      finish_reason: completion.choices[0]!.finish_reason,
      status: "success",
      error_code: null,
    });
    const charged = await postedChargeMicros(requestId);
    expect(charged).toBeGreaterThan(0n);
    expect(Math.round(generation.cost_usd * 1e6)).toBe(Number(charged));
    expect(generation.latency_ms).toBeGreaterThan(0);
    expect(generation.time_to_first_token_ms).toBeGreaterThanOrEqual(0);
    expect(generation.time_to_first_token_ms).toBeLessThanOrEqual(generation.latency_ms);
    expect(Date.parse(generation.created_at)).toBeGreaterThan(Date.now() - 60_000);
    // The bare request id names the same request.
    expect(await getGeneration(requestId)).toEqual({ status: 200, body: generation });
  });

  it("finds a streamed request, and a Responses API request by its resp_ id", async () => {
    const stream = await client.chat.completions.create({
      model: "demo-small",
      messages: [{ role: "user", content: "Stream, then look me up." }],
      stream: true,
      max_tokens: 5,
    });
    let id = "";
    for await (const chunk of stream) id = chunk.id;
    expect(await settledGeneration(id)).toMatchObject({ id, finish_reason: "length", status: "success" });

    const answer = await client.responses.create({ model: "demo-small", input: "Hi" });
    const generation = await settledGeneration(answer.id);
    expect(answer.id).toBe(`resp_${generation.request_id}`);
    expect(generation).toMatchObject({ output_tokens: answer.usage!.output_tokens, status: "success" });
  });

  it("is 404 in the OpenAI error shape for another account's request and for an unknown id", async () => {
    const completion = await client.chat.completions.create({
      model: "auto",
      messages: [{ role: "user", content: "Mine only." }],
      max_tokens: 4,
    });
    await settledGeneration(completion.id);
    const { apiKey: otherKey } = await signUp(system.url);
    for (const { status, body } of [
      await getGeneration(completion.id, otherKey),
      await getGeneration(`chatcmpl-${crypto.randomUUID()}`),
      await getGeneration(crypto.randomUUID()),
      await getGeneration("chatcmpl-not-an-id"),
    ]) {
      expect(status).toBe(404);
      expect(body).toEqual({
        error: { message: "No such generation.", type: "invalid_request_error", param: "id", code: "not_found" },
      });
    }
  });

  it("refuses a malformed id as other routes do: 400 when too long or holding a control character", async () => {
    for (const id of ["x".repeat(65), "chatcmpl-%00"]) {
      const { status, body } = await getGeneration(id);
      expect(status).toBe(400);
      expect(body.error).toMatchObject({ type: "invalid_request_error", code: "invalid_request", param: "id" });
    }
  });

  it("needs a key", async () => {
    const res = await fetch(`${system.url}/v1/generations/${crypto.randomUUID()}`);
    expect(res.status).toBe(401);
  });
});
