import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { contentOf, startRecordingUpstream, toolCallOf, type RecordedCall } from "./recording-upstream.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// The official `openai` SDK against the running system, with the local model served by a
// recording OpenAI-compatible server: what the SDK sends must reach the upstream unchanged except
// for the documented rewrites (docs/adr/0031-chat-bodies-pass-through.md), and
// what the upstream answers must come back in shapes the SDK parses (choices, tool calls, JSON).

type Json = Record<string, unknown>;

const MODEL = "compat-model";
/** The name the upstream knows the model by (LOCAL_MODELS `upstream_model`): the registry rewrites it. */
const UPSTREAM_MODEL = "recorded/upstream-model-v1";
/** What the registry grants when the request sets no cap: the platform cap (the context has room). */
const PLATFORM_CAP = 4096;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let recorder: Awaited<ReturnType<typeof startRecordingUpstream>>;
let system: RunningSystem;
let client: OpenAI;
let apiKey: string;

beforeAll(async () => {
  recorder = await startRecordingUpstream();
  system = await startSystem({
    registry: {
      LOCAL_MODEL_URL: recorder.url,
      LOCAL_MODEL_TOKEN: recorder.token,
      LOCAL_MODELS: JSON.stringify([
        {
          model_id: MODEL,
          model_alias: "Compat Model",
          context_window: 16384,
          input_price_per_1m_usd: "0.50",
          output_price_per_1m_usd: "1.50",
          upstream_model: UPSTREAM_MODEL,
          // The requests below ask for two choices.
          max_n: 2,
        },
      ]),
    },
  });
  ({ apiKey } = await signUp(system.url));
  client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey, maxRetries: 0 });
});
afterAll(async () => {
  await system?.close();
  await recorder?.close();
});

/**
 * The body the upstream must receive for `sent`: the same JSON, except the model's upstream name,
 * `max_tokens` set to the cap billing granted (`max_completion_tokens` folded into it), and always
 * streaming with usage, so the registry can count what it relays.
 */
function forwarded(sent: Json, maxTokens: number): Json {
  const { max_completion_tokens: _folded, ...rest } = sent;
  return {
    ...rest,
    model: UPSTREAM_MODEL,
    max_tokens: maxTokens,
    stream: true,
    stream_options: { ...((sent.stream_options as Json | undefined) ?? {}), include_usage: true },
  };
}

/** The single chat request the upstream received since the last look. */
function onlyCall(): RecordedCall {
  const calls = recorder.takeCalls();
  expect(calls).toHaveLength(1);
  return calls[0]!;
}

const WEATHER_TOOL = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather for a city.",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, choice: { type: "integer" } },
      required: ["city", "choice"],
      additionalProperties: false,
    },
    strict: true,
  },
} satisfies OpenAI.ChatCompletionTool;

/** A conversation that already used the tool once: its history must reach the upstream as sent. */
const TOOL_HISTORY: OpenAI.ChatCompletionMessageParam[] = [
  { role: "system", content: "Use tools when they help." },
  { role: "user", content: "What is the weather in Rome?" },
  {
    role: "assistant",
    content: null,
    tool_calls: [
      { id: "call_rome", type: "function", function: { name: "get_weather", arguments: '{"city":"Rome"}' } },
    ],
  },
  { role: "tool", tool_call_id: "call_rome", content: '{"temp_c":21,"sky":"clear"}' },
  { role: "user", content: "And in Paris?" },
];

describe("chat completions with the openai SDK: what reaches the upstream, what comes back", () => {
  it("non-streaming: n, stop, temperature and every other field arrive as sent; n: 2 gives two choices", async () => {
    const params = {
      model: MODEL,
      messages: [
        { role: "developer", content: 'Answer briefly. Ünïcödé — 東京 🚀 "quoted" \\ backslash' },
        {
          role: "user",
          content: [
            { type: "text", text: "Describe this picture." },
            { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=", detail: "low" } },
          ],
          name: "alice",
        },
      ],
      n: 2,
      stop: ["\n\nHuman:", "END"],
      temperature: 0.7,
      top_p: 0.95,
      seed: 1234567,
      presence_penalty: 0.5,
      frequency_penalty: -0.25,
      logit_bias: { "50256": -100, "1234": 3.5 },
      logprobs: true,
      top_logprobs: 2,
      user: "customer-42",
      metadata: { team: "compat", nested: "no" },
      max_tokens: 64,
    } satisfies OpenAI.ChatCompletionCreateParamsNonStreaming;
    // A field the SDK's types do not know (a vendor extension) is sent and must pass too.
    const sent = { ...params, top_k: 40, chat_template_kwargs: { enable_thinking: false } };

    const completion = await client.chat.completions.create(sent as OpenAI.ChatCompletionCreateParamsNonStreaming);

    const call = onlyCall();
    expect(call.body).toStrictEqual(forwarded(sent, 64));
    // The upstream sees the platform's token for it, never the customer's key.
    expect(call.authorization).toBe(`Bearer ${recorder.token}`);

    expect(completion.object).toBe("chat.completion");
    expect(completion.model).toBe(MODEL); // the public id, not the upstream's name
    expect(completion.choices.map((c) => [c.index, c.message.content, c.finish_reason])).toStrictEqual([
      [0, contentOf(0, call.body), "stop"],
      [1, contentOf(1, call.body), "stop"],
    ]);
    expect(completion.choices[1]!.message.role).toBe("assistant");
    expect(completion.usage!.total_tokens).toBe(completion.usage!.prompt_tokens + completion.usage!.completion_tokens);
    expect(completion._request_id).toMatch(UUID);
  });

  it("streaming: the fields pass the same way, max_completion_tokens becomes the upstream's max_tokens, and n: 2 streams both choices", async () => {
    const params = {
      model: MODEL,
      messages: [{ role: "user", content: "Stream two answers." }],
      stream: true,
      n: 2,
      stop: "END",
      temperature: 0,
      max_completion_tokens: 32,
    } satisfies OpenAI.ChatCompletionCreateParamsStreaming;

    const { data: stream, response } = await client.chat.completions.create(params).withResponse();
    expect(response.headers.get("content-type")).toContain("text/event-stream");
    expect(response.headers.get("x-request-id")).toMatch(UUID);

    const text = ["", ""];
    const finish: Array<string | null> = [null, null];
    for await (const chunk of stream) {
      expect(chunk.object).toBe("chat.completion.chunk");
      expect(chunk.model).toBe(MODEL);
      // No usage chunk was asked for, though the upstream was made to send one.
      expect(chunk.usage ?? null).toBeNull();
      for (const choice of chunk.choices) {
        text[choice.index] += choice.delta.content ?? "";
        finish[choice.index] = choice.finish_reason ?? finish[choice.index]!;
      }
    }

    const call = onlyCall();
    expect(call.body).toStrictEqual(forwarded(params, 32));
    expect(call.body).not.toHaveProperty("max_completion_tokens");
    expect(text).toStrictEqual([contentOf(0, call.body), contentOf(1, call.body)]);
    expect(finish).toStrictEqual(["stop", "stop"]);
  });

  it("stream_options.include_usage: passed on, and the stream ends with a usage chunk with no choices", async () => {
    const params = {
      model: MODEL,
      messages: [{ role: "user", content: "Count my tokens." }],
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 16,
    } satisfies OpenAI.ChatCompletionCreateParamsStreaming;

    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of await client.chat.completions.create(params)) chunks.push(chunk);

    expect(onlyCall().body).toStrictEqual(forwarded(params, 16));
    const last = chunks.at(-1)!;
    expect(last.choices).toStrictEqual([]);
    expect(last.usage!.completion_tokens).toBeGreaterThan(0);
    expect(last.usage!.total_tokens).toBe(last.usage!.prompt_tokens + last.usage!.completion_tokens);
    expect(chunks.slice(0, -1).every((chunk) => !chunk.usage)).toBe(true);
  });

  it("tools: definitions, tool_choice and the tool-call history arrive as sent; the tool_calls answer parses", async () => {
    const params = {
      model: MODEL,
      messages: TOOL_HISTORY,
      tools: [WEATHER_TOOL],
      tool_choice: { type: "function", function: { name: "get_weather" } },
      parallel_tool_calls: false,
    } satisfies OpenAI.ChatCompletionCreateParamsNonStreaming;

    const completion = await client.chat.completions.create(params);

    // No cap in the request: the upstream gets the one billing granted.
    expect(onlyCall().body).toStrictEqual(forwarded(params, PLATFORM_CAP));
    const [choice] = completion.choices;
    expect(choice!.finish_reason).toBe("tool_calls");
    expect(choice!.message.content).toBeNull();
    expect(choice!.message.tool_calls).toStrictEqual([toolCallOf(0, "get_weather")]);
    const toolCall = choice!.message.tool_calls![0]!;
    expect(toolCall.type === "function" && JSON.parse(toolCall.function.arguments)).toStrictEqual({
      city: "Paris",
      choice: 0,
    });
  });

  it("tools, streamed: the SDK's stream helper assembles tool_calls from the deltas of both choices", async () => {
    const params = {
      model: MODEL,
      messages: TOOL_HISTORY,
      tools: [WEATHER_TOOL],
      tool_choice: "required",
      n: 2,
      max_tokens: 100,
    } satisfies OpenAI.ChatCompletionCreateParamsNonStreaming;

    const runner = client.chat.completions.stream(params);
    const final = await runner.finalChatCompletion();

    // The helper sends the body with stream: true, and nothing else added.
    expect(onlyCall().body).toStrictEqual(forwarded({ ...params, stream: true }, 100));
    // A strict tool's arguments are also parsed by the helper (`parsed_arguments`).
    const parsedCall = (i: number) => {
      const call = toolCallOf(i, "get_weather");
      return { ...call, function: { ...call.function, parsed_arguments: { city: "Paris", choice: i } } };
    };
    expect(final.choices.map((c) => [c.finish_reason, c.message.tool_calls])).toStrictEqual([
      ["tool_calls", [parsedCall(0)]],
      ["tool_calls", [parsedCall(1)]],
    ]);
  });

  it("response_format (json_schema): arrives as sent, and the SDK's parse() reads the JSON answer", async () => {
    const params = {
      model: MODEL,
      messages: [{ role: "user", content: "Answer in JSON." }],
      response_format: {
        type: "json_schema",
        json_schema: {
          name: "answer",
          strict: true,
          schema: {
            type: "object",
            properties: { answer: { type: "string" }, ok: { type: "boolean" } },
            required: ["answer", "ok"],
            additionalProperties: false,
          },
        },
      },
      max_tokens: 50,
    } satisfies OpenAI.ChatCompletionCreateParamsNonStreaming;

    const completion = await client.chat.completions.parse(params);

    expect(onlyCall().body).toStrictEqual(forwarded(params, 50));
    expect(completion.choices[0]!.message.parsed).toStrictEqual({ answer: "choice 0", ok: true });
  });

  it("json_object response_format, streamed with the SDK helper: arrives as sent, content is the upstream's JSON", async () => {
    const params = {
      model: MODEL,
      messages: [{ role: "user", content: "JSON, streamed." }],
      response_format: { type: "json_object" },
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 20,
    } satisfies OpenAI.ChatCompletionCreateParamsStreaming;

    const final = await client.chat.completions.stream(params).finalChatCompletion();

    const call = onlyCall();
    expect(call.body).toStrictEqual(forwarded(params, 20));
    expect(JSON.parse(final.choices[0]!.message.content!)).toStrictEqual({ answer: "choice 0", ok: true });
    expect(final.usage!.completion_tokens).toBeGreaterThan(0);
  });
});

describe("models with the openai SDK", () => {
  it("GET /v1/models parses as the SDK's model list", async () => {
    const { data: page, response } = await client.models.list().withResponse();
    expect(response.headers.get("x-request-id")).toMatch(UUID);
    expect(page.data.map((m) => m.id)).toStrictEqual([MODEL]);
    const [model] = page.data;
    expect(model).toMatchObject({ id: MODEL, object: "model", owned_by: "platform" });
    expect(Number.isInteger(model!.created)).toBe(true);
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toStrictEqual([MODEL]);
  });

  it("GET /v1/models/{model} retrieves one model; an unknown one is the SDK's NotFoundError", async () => {
    const model = await client.models.retrieve(MODEL);
    expect(model).toMatchObject({ id: MODEL, object: "model", owned_by: "platform" });
    expect(model._request_id).toMatch(UUID);
    const err = await client.models.retrieve("no-such-model").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err).toMatchObject({ status: 404, code: "model_not_found" });
  });
});

describe("x-request-id", () => {
  it("is a fresh id on every response, and a client-sent one is not echoed", async () => {
    const params = { model: MODEL, messages: [{ role: "user" as const, content: "hi" }], max_tokens: 5 };
    const a = await client.chat.completions.create(params, { headers: { "x-request-id": "client-chosen" } });
    const b = await client.chat.completions.create(params);
    recorder.takeCalls();
    expect(a._request_id).toMatch(UUID);
    expect(b._request_id).toMatch(UUID);
    expect(a._request_id).not.toBe(b._request_id);
  });
});

describe("the Responses API reaches the upstream as the equivalent chat request", () => {
  it("translates instructions, input items with a tool round trip, tools, tool_choice and text.format", async () => {
    const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] };
    const response = await client.responses.create({
      model: MODEL,
      instructions: "Use tools when they help.",
      input: [
        { role: "user", content: [{ type: "input_text", text: "What is the weather in Rome?" }] },
        { type: "function_call", call_id: "call_rome", name: "get_weather", arguments: '{"city":"Rome"}' },
        { type: "function_call_output", call_id: "call_rome", output: '{"temp_c":21}' },
        { role: "assistant", content: "It is 21 °C." },
        { role: "user", content: "And in Paris?" },
      ],
      tools: [{ type: "function", name: "get_weather", parameters: WEATHER_TOOL.function.parameters, strict: true }],
      tool_choice: { type: "function", name: "get_weather" },
      parallel_tool_calls: false,
      text: { format: { type: "json_schema", name: "weather", schema, strict: true } },
      max_output_tokens: 100,
      temperature: 0.2,
      top_p: 0.9,
      user: "customer-42",
      metadata: { team: "compat" },
      store: false,
      include: ["message.output_text.logprobs"],
    });
    expect(onlyCall().body).toStrictEqual({
      model: UPSTREAM_MODEL,
      messages: [
        { role: "system", content: "Use tools when they help." },
        { role: "user", content: [{ type: "text", text: "What is the weather in Rome?" }] },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            { id: "call_rome", type: "function", function: { name: "get_weather", arguments: '{"city":"Rome"}' } },
          ],
        },
        { role: "tool", tool_call_id: "call_rome", content: '{"temp_c":21}' },
        { role: "assistant", content: "It is 21 °C." },
        { role: "user", content: "And in Paris?" },
      ],
      tools: [
        {
          type: "function",
          function: { name: "get_weather", parameters: WEATHER_TOOL.function.parameters, strict: true },
        },
      ],
      tool_choice: { type: "function", function: { name: "get_weather" } },
      parallel_tool_calls: false,
      response_format: { type: "json_schema", json_schema: { name: "weather", schema, strict: true } },
      max_tokens: 100,
      temperature: 0.2,
      top_p: 0.9,
      user: "customer-42",
      stream: true,
      stream_options: { include_usage: true },
    });
    // The upstream's tool call comes back as a function_call item; metadata is echoed, not sent.
    const call = toolCallOf(0, "get_weather");
    expect(response.output).toEqual([
      expect.objectContaining({
        type: "function_call",
        call_id: call.id,
        name: "get_weather",
        arguments: call.function.arguments,
      }),
    ]);
    expect(response.metadata).toEqual({ team: "compat" });
  });
});
