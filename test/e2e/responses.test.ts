import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { costMicros } from "@mkt/runtime/money";
import { DEMO_PRICES, signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";

// POST /v1/responses with the clients that call it by default: the official SDK's
// responses.create and the Vercel AI SDK's default OpenAI provider. The answer travels the chat
// path (admission, relay, metering) and is billed like any chat completion.

interface Usage {
  credit_balance_usd: number;
  usage_30d: {
    total_requests: number;
    total_input_tokens: number;
    total_output_tokens: number;
    total_cost_microdollars: number;
  };
}

let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem();
});
afterAll(async () => {
  await system?.close();
});

async function customer() {
  const { apiKey } = await signUp(system.url);
  return { apiKey, client: new OpenAI({ baseURL: `${system.url}/v1`, apiKey, maxRetries: 0 }) };
}

const expectedCost = (input: number, output: number) =>
  Number(costMicros(BigInt(input), BigInt(output), DEMO_PRICES.input, DEMO_PRICES.output));

describe("responses.create (official openai SDK)", () => {
  it("answers a string input, and bills it as the chat path does", async () => {
    const { apiKey, client } = await customer();
    const response = await client.responses.create({
      model: "auto",
      instructions: "Be brief.",
      input: "Tell me about marketplaces.",
    });
    expect(response).toMatchObject({ object: "response", status: "completed", model: "demo-small", store: false });
    expect(response.id).toMatch(/^resp_/);
    expect(response.output_text.length).toBeGreaterThan(0);
    expect(response.output).toEqual([
      expect.objectContaining({
        type: "message",
        role: "assistant",
        status: "completed",
        content: [expect.objectContaining({ type: "output_text", text: response.output_text })],
      }),
    ]);
    const { input_tokens, output_tokens, total_tokens } = response.usage!;
    expect(input_tokens).toBeGreaterThan(0);
    expect(output_tokens).toBeGreaterThan(0);
    expect(total_tokens).toBe(input_tokens + output_tokens);

    const usage = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests === 1);
    expect(usage.usage_30d).toMatchObject({
      total_input_tokens: input_tokens,
      total_output_tokens: output_tokens,
      total_cost_microdollars: expectedCost(input_tokens, output_tokens),
    });
  });

  it("streams the documented event sequence, numbered, ending in response.completed with usage", async () => {
    const { client } = await customer();
    const input = [{ role: "user" as const, content: "Stream something." }];
    const whole = await client.responses.create({ model: "auto", input });
    const events = [];
    for await (const event of await client.responses.create({ model: "auto", input, stream: true })) events.push(event);

    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const types = events.map((e) => e.type);
    expect(types.slice(0, 4)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
    ]);
    expect(types.slice(-4)).toEqual([
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(new Set(types.slice(4, -4))).toEqual(new Set(["response.output_text.delta"]));
    const text = events.flatMap((e) => (e.type === "response.output_text.delta" ? [e.delta] : [])).join("");
    expect(text).toBe(whole.output_text);
    const completed = events.at(-1)!;
    if (completed.type !== "response.completed") throw new Error("not completed");
    expect(completed.response.output).toEqual(whole.output.map((item) => ({ ...item, id: expect.any(String) })));
    expect(completed.response.usage).toEqual(whole.usage);
  });

  it("ends with response.incomplete (max_output_tokens) when the cap cuts the answer", async () => {
    const { client } = await customer();
    const cut = await client.responses.create({ model: "auto", input: "Go on and on.", max_output_tokens: 5 });
    expect(cut.status).toBe("incomplete");
    expect(cut.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(cut.usage!.output_tokens).toBeLessThanOrEqual(5);

    const events = [];
    const stream = await client.responses.create({
      model: "auto",
      input: "Go on and on.",
      max_output_tokens: 5,
      stream: true,
    });
    for await (const event of stream) events.push(event);
    const last = events.at(-1)!;
    expect(last.type).toBe("response.incomplete");
    if (last.type !== "response.incomplete") throw new Error("not incomplete");
    expect(last.response.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(last.response.output).toEqual([expect.objectContaining({ type: "message", status: "incomplete" })]);
    expect(last.response.usage!.output_tokens).toBe(cut.usage!.output_tokens);
  });

  it("refuses what a stateless gateway cannot do, with a 400 that says so", async () => {
    const { client } = await customer();
    const refused = async (body: Record<string, unknown>) => {
      const err = await client.responses
        .create({ model: "auto", input: "Hi", ...body } as never)
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      return err as InstanceType<typeof OpenAI.BadRequestError>;
    };
    const previous = await refused({ previous_response_id: "resp_123" });
    expect(previous.param).toBe("previous_response_id");
    expect(previous.message).toMatch(/previous_response_id is not supported.*stateless/);

    const reference = await refused({ store: true, input: [{ type: "item_reference", id: "msg_1" }] });
    expect(reference.param).toBe("input[0]");
    expect(reference.message).toContain("providerOptions.openai.store: false");

    const builtIn = await refused({ tools: [{ type: "file_search", vector_store_ids: ["vs_1"] }] });
    expect(builtIn.param).toBe("tools[0].type");
    expect(builtIn.message).toMatch(/Built-in tools \(file_search\) are not supported/);
  });
});

it.each([
  ["an empty input", { input: [] }, "input"],
  ["an item of no known type", { input: [{ content: "x" }] }, "input[0].type"],
  [
    "only a reasoning item (dropped, leaving nothing to answer)",
    { input: [{ type: "reasoning", id: "rs_1", summary: [] }] },
    "input",
  ],
  [
    "a built-in tool call item",
    { input: [{ type: "web_search_call", id: "ws_1", status: "completed" }] },
    "input[0].type",
  ],
  [
    "a function_call without arguments",
    { input: [{ type: "function_call", call_id: "c", name: "f" }] },
    "input[0].arguments",
  ],
  ["a function tool without a name", { tools: [{ type: "function" }] }, "tools[0].name"],
  ["an unknown tool_choice", { tools: [{ type: "function", name: "f" }], tool_choice: "sometimes" }, "tool_choice"],
  ["tool_choice required without tools", { tool_choice: "required" }, "tool_choice"],
  [
    "a json_schema format without a schema",
    { text: { format: { type: "json_schema", name: "x" } } },
    "text.format.schema",
  ],
  ["temperature out of range", { temperature: 3 }, "temperature"],
])("answers %s with a 400 naming the field", async (_name, body, param) => {
  const { apiKey } = await customer();
  const res = await fetch(`${system.url}/v1/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "auto", input: "Hi", ...body }),
  });
  expect(res.status).toBe(400);
  expect(((await res.json()) as { error: object }).error).toMatchObject({ code: "invalid_request", param });
});

it("is documented in the OpenAPI document", async () => {
  const doc = (await (await fetch(`${system.url}/docs/json`)).json()) as { paths: Record<string, object> };
  expect(Object.keys(doc.paths["/v1/responses"]!)).toEqual(["post"]);
});

describe("the Vercel AI SDK's default provider (Responses API)", () => {
  it("generateText and streamText answer, with usage", async () => {
    const { apiKey } = await customer();
    const openai = createOpenAI({ baseURL: `${system.url}/v1`, apiKey });
    const generated = await generateText({ model: openai("demo-small"), prompt: "Hello there!", maxRetries: 0 });
    expect(generated.text.length).toBeGreaterThan(0);
    expect(generated.finishReason).toBe("stop");
    expect(generated.usage.outputTokens).toBeGreaterThan(0);
    expect(generated.response.id).toMatch(/^resp_/);

    const streamed = streamText({ model: openai("demo-small"), prompt: "Hello there!", maxRetries: 0 });
    let text = "";
    for await (const delta of streamed.textStream) text += delta;
    expect(text).toBe(generated.text);
    expect(await streamed.finishReason).toBe("stop");
    expect((await streamed.usage).outputTokens).toBe(generated.usage.outputTokens);
  });
});
