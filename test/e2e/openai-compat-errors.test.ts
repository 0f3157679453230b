import OpenAI, { APIError } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { FAIL_BEFORE_ANSWER, FAIL_MID_STREAM, startRecordingUpstream, UPSTREAM_SECRET } from "./recording-upstream.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Every refusal the gateway can give a chat client, seen through the official `openai` SDK: each
// must surface as the SDK's error class for its status (docs/architecture.md#errors), with `code`,
// `type` and `param` read from the OpenAI-shaped body, and the response's x-request-id.

const MODEL = "compat-model";
/** So expensive that a fresh account's 5 USD cannot pay its prompt: 1 USD per input token. */
const PRICEY_MODEL = "pricey-model";
/** The tier's requests per UTC day: small, so the limit is reached in a few requests. */
const DAY_LIMIT = 3;
const PROBE_MS = 200;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** One of the SDK's error classes (APIError or a subclass). */
type ErrorClass = new (...args: never[]) => APIError;

let recorder: Awaited<ReturnType<typeof startRecordingUpstream>>;
let system: RunningSystem;

beforeAll(async () => {
  recorder = await startRecordingUpstream();
  system = await startSystem({
    billing: { TIERS: JSON.stringify({ free: { limit_per_minute: 60, limit_per_day: DAY_LIMIT } }) },
    registry: {
      LOCAL_MODEL_URL: recorder.url,
      LOCAL_MODEL_TOKEN: recorder.token,
      LOCAL_MODELS: JSON.stringify([
        { model_id: MODEL, context_window: 8192, input_price_per_1m_usd: "0.50", output_price_per_1m_usd: "1.50" },
        {
          model_id: PRICEY_MODEL,
          context_window: 8192,
          input_price_per_1m_usd: "1000000",
          output_price_per_1m_usd: "1000000",
        },
      ]),
      // A hoster whose server stops is marked unhealthy within a few probes.
      HOSTER_PROBE_INTERVAL_MS: String(PROBE_MS),
      HOSTER_UNHEALTHY_AFTER: "2",
    },
  });
});
afterAll(async () => {
  await system?.close();
  await recorder?.close();
});

const sdk = (apiKey: string) => new OpenAI({ baseURL: `${system.url}/v1`, apiKey, maxRetries: 0 });

/** A fresh customer's SDK client (each test its own account, so the day limit is its own). */
async function customer(): Promise<OpenAI> {
  return sdk((await signUp(system.url)).apiKey);
}

const hi = (model = MODEL) => ({ model, messages: [{ role: "user" as const, content: "hi" }], max_tokens: 5 });

/** The error a call ends with (it must end with one). */
async function failure(call: Promise<unknown> | (() => Promise<unknown>)): Promise<APIError> {
  try {
    await (typeof call === "function" ? call() : call);
  } catch (err) {
    return err as APIError;
  }
  throw new Error("the call succeeded; an error was expected");
}

/**
 * `err` is exactly the SDK's class for its status (not merely a subclass of APIError), with the
 * status, the body's code / type / param, and the response's x-request-id.
 */
function expectSdkError(
  err: APIError,
  errorClass: ErrorClass,
  expected: { status: number; code: string; type: string; param?: string | null },
): void {
  expect(err, String(err)).toBeInstanceOf(errorClass);
  expect(err.constructor).toBe(errorClass);
  const { param, ...rest } = expected;
  expect(err).toMatchObject(rest);
  if (param !== undefined) expect(err.param).toBe(param);
  expect(err.requestID).toMatch(UUID);
  expect(err.headers?.get("content-type")).toContain("application/json");
}

describe("errors as the openai SDK's error classes", () => {
  it("401: an unknown key is AuthenticationError invalid_api_key, for chat, streamed chat and models", async () => {
    const expected = { status: 401, code: "invalid_api_key", type: "authentication_error" };
    for (const key of ["mk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "not-even-our-format"]) {
      const client = sdk(key);
      expectSdkError(await failure(client.chat.completions.create(hi())), OpenAI.AuthenticationError, expected);
      expectSdkError(
        await failure(client.chat.completions.create({ ...hi(), stream: true })),
        OpenAI.AuthenticationError,
        expected,
      );
      expectSdkError(await failure(client.models.list()), OpenAI.AuthenticationError, expected);
    }
    expect(recorder.takeCalls()).toStrictEqual([]);
  });

  it("400: a bad body is BadRequestError invalid_request naming the field, and nothing reaches the upstream", async () => {
    const client = await customer();
    const messages = [{ role: "user", content: "hi" }];
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ model: MODEL }, "messages"],
      [{ model: MODEL, messages: [] }, "messages"],
      [{ model: MODEL, messages: [{ role: "robot", content: "hi" }] }, "messages[0].role"],
      [{ model: MODEL, messages, temperature: "hot" }, "temperature"],
      [{ model: MODEL, messages, temperature: 2.5 }, "temperature"],
      [{ model: MODEL, messages, top_p: "most" }, "top_p"],
      [{ model: MODEL, messages, n: 0 }, "n"],
      [{ model: MODEL, messages, n: 1.5 }, "n"],
      [{ model: MODEL, messages, stop: 42 }, "stop"],
      [{ model: MODEL, messages, stop: ["ok", 7] }, "stop[1]"],
      [{ model: MODEL, messages, tools: { type: "function" } }, "tools"],
      [{ model: MODEL, messages, tools: [{ function: { name: "f" } }] }, "tools[0].type"],
      [{ model: MODEL, messages, tool_choice: 1 }, "tool_choice"],
      [{ model: MODEL, messages, response_format: "json" }, "response_format"],
      [{ model: MODEL, messages, response_format: {} }, "response_format.type"],
      [{ model: MODEL, messages, max_tokens: -5 }, "max_tokens"],
      [{ model: MODEL, messages, stream: "yes" }, "stream"],
    ];
    for (const [body, param] of cases) {
      const err = await failure(client.chat.completions.create(body as never));
      expectSdkError(err, OpenAI.BadRequestError, {
        status: 400,
        code: "invalid_request",
        type: "invalid_request_error",
        param,
      });
    }
    // Refused before the stream starts, so a streaming call throws the same class from create().
    const streamed = await failure(
      client.chat.completions.create({ ...hi(), stream: true, temperature: "hot" as unknown as number }),
    );
    expectSdkError(streamed, OpenAI.BadRequestError, {
      status: 400,
      code: "invalid_request",
      type: "invalid_request_error",
      param: "temperature",
    });
    expect(recorder.takeCalls()).toStrictEqual([]);
  });

  it("404: an unknown model is NotFoundError model_not_found, streamed or not", async () => {
    const client = await customer();
    const expected = { status: 404, code: "model_not_found", type: "invalid_request_error", param: "model" };
    expectSdkError(await failure(client.chat.completions.create(hi("no-such-model"))), OpenAI.NotFoundError, expected);
    expectSdkError(
      await failure(client.chat.completions.create({ ...hi("no-such-model"), stream: true })),
      OpenAI.NotFoundError,
      expected,
    );
    // A path the gateway does not serve is a 404 of the same shape (and carries x-request-id too).
    expectSdkError(await failure(client.get("/no-such-endpoint")), OpenAI.NotFoundError, {
      status: 404,
      code: "not_found",
      type: "invalid_request_error",
    });
  });

  it("402: insufficient credit is the SDK's base APIError with status 402 and code insufficient_credits", async () => {
    const client = await customer();
    const err = await failure(client.chat.completions.create(hi(PRICEY_MODEL)));
    // The SDK has no class of its own for 402: it is an APIError, and no 4xx/5xx subclass.
    expectSdkError(err, APIError, { status: 402, code: "insufficient_credits", type: "insufficient_quota" });
    expect(err.message).toMatch(/balance is \$5\.00/);
    expect(recorder.takeCalls()).toStrictEqual([]);
  });

  it("429: the account's limit is RateLimitError rate_limit_exceeded, with retry-after and the rate-limit headers", async () => {
    const client = await customer();
    for (let i = 0; i < DAY_LIMIT; i++) await client.chat.completions.create(hi());
    recorder.takeCalls();

    const err = await failure(client.chat.completions.create(hi()));
    expectSdkError(err, OpenAI.RateLimitError, { status: 429, code: "rate_limit_exceeded", type: "rate_limit_error" });
    const retryAfter = Number(err.headers!.get("retry-after"));
    expect(Number.isInteger(retryAfter) && retryAfter > 0 && retryAfter <= 86_400).toBe(true);
    expect(err.headers!.get("x-ratelimit-limit-requests")).toBe(String(DAY_LIMIT));
    expect(err.headers!.get("x-ratelimit-remaining-requests")).toBe("0");
    expect(recorder.takeCalls()).toStrictEqual([]);
  });

  it("502: an upstream failing before its first byte is InternalServerError upstream_error, with none of its body", async () => {
    const client = await customer();
    const failing = { ...hi(), messages: [{ role: "user" as const, content: FAIL_BEFORE_ANSWER }] };
    const expected = { status: 502, code: "upstream_error", type: "api_error" };
    for (const err of [
      await failure(client.chat.completions.create(failing)),
      // Nothing was sent yet, so a streaming call gets the HTTP error too, not a stream.
      await failure(client.chat.completions.create({ ...failing, stream: true })),
    ]) {
      expectSdkError(err, OpenAI.InternalServerError, expected);
      expect(JSON.stringify(err.error)).not.toContain(UPSTREAM_SECRET);
    }
    expect(recorder.takeCalls()).toHaveLength(2);
  });

  it("an upstream failing mid-stream ends the SDK's stream with an APIError upstream_error after the partial answer", async () => {
    const client = await customer();
    const { data: stream, response } = await client.chat.completions
      .create({ ...hi(), messages: [{ role: "user", content: FAIL_MID_STREAM }], stream: true })
      .withResponse();
    expect(response.status).toBe(200);
    let text = "";
    const err = await failure(async () => {
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    });
    expect(text).toBe("Partial answer");
    expect(err).toBeInstanceOf(APIError);
    // The status was 200 when the stream started; the error is in the final event.
    expect(err).toMatchObject({ status: undefined, code: "upstream_error", type: "api_error" });
    expect(err.requestID).toBe(response.headers.get("x-request-id"));
    expect(err.requestID).toMatch(UUID);
    recorder.takeCalls();
  });
});

describe("errors on the Responses API", () => {
  it("an upstream failing mid-stream ends the stream with response.failed after the partial answer", async () => {
    const client = await customer();
    const stream = await client.responses.create({ model: MODEL, input: FAIL_MID_STREAM, stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const text = events.flatMap((e) => (e.type === "response.output_text.delta" ? [e.delta] : [])).join("");
    expect(text).toBe("Partial answer");
    const last = events.at(-1)!;
    if (last.type !== "response.failed") throw new Error(`ended with ${last.type}`);
    expect(last.response.status).toBe("failed");
    expect(last.response.error).toEqual({ code: "upstream_error", message: expect.any(String) });
    expect(JSON.stringify(events)).not.toContain(UPSTREAM_SECRET);
    recorder.takeCalls();
  });

  it("an upstream failing before the answer is an HTTP error, as on chat", async () => {
    const client = await customer();
    const err = await failure(client.responses.create({ model: MODEL, input: FAIL_BEFORE_ANSWER, stream: true }));
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect(err).toMatchObject({ status: 502, code: "upstream_error" });
    recorder.takeCalls();
  });
});

describe("errors for a subscription's scoped key", () => {
  let hoster: RegisteredHoster;
  let subscriptionId: string;
  let scoped: OpenAI;

  async function call(method: string, path: string, options: { key?: string; cookie?: string; body?: unknown }) {
    const headers: Record<string, string> = {};
    if (options.key) headers.authorization = `Bearer ${options.key}`;
    if (options.cookie) headers.cookie = options.cookie;
    if (options.body !== undefined) headers["content-type"] = "application/json";
    const body = options.body === undefined ? undefined : JSON.stringify(options.body);
    const res = await fetch(`${system.url}${path}`, { method, headers, body });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  }

  beforeAll(async () => {
    hoster = await registerHoster(system, { name: "Compat Hoster" });
    const plan = await call("POST", "/hosters/products", {
      cookie: hoster.cookie,
      body: { name: "Free", pricing_model: "free" },
    });
    expect(plan.status, JSON.stringify(plan.body)).toBe(201);
    const { apiKey } = await signUp(system.url);
    const sub = await call("POST", "/v1/subscriptions", { key: apiKey, body: { product_id: plan.body.product_id } });
    expect(sub.status, JSON.stringify(sub.body)).toBe(201);
    subscriptionId = sub.body.subscription_id as string;
    scoped = sdk(sub.body.api_key as string);
  });
  afterAll(async () => {
    await hoster?.server.close();
  });

  it("403: a scoped key outside its scope (/v1/keys) is PermissionDeniedError forbidden", async () => {
    const err = await failure(scoped.get("/keys"));
    expectSdkError(err, OpenAI.PermissionDeniedError, { status: 403, code: "forbidden", type: "permission_error" });
  });

  it("403: a paused subscription is PermissionDeniedError subscription_paused with the exact message", async () => {
    const paused = await call("POST", `/hosters/subscribers/${subscriptionId}/pause`, { cookie: hoster.cookie });
    expect(paused.status, JSON.stringify(paused.body)).toBe(200);
    try {
      const err = await failure(scoped.chat.completions.create(hi("auto")));
      expectSdkError(err, OpenAI.PermissionDeniedError, {
        status: 403,
        code: "subscription_paused",
        type: "permission_error",
      });
      expect(err.error).toMatchObject({ message: "Your access has been temporarily paused by the hoster." });
    } finally {
      await call("POST", `/hosters/subscribers/${subscriptionId}/resume`, { cookie: hoster.cookie });
    }
  });

  it("503: no healthy upstream is InternalServerError no_healthy_upstream", async () => {
    await hoster.server.close();
    // Wait for the probes to mark the hoster unhealthy, then for routing's cached row (at most one
    // probe interval old) to see it.
    const deadline = Date.now() + 10_000;
    while ((await call("GET", "/hosters/me", { cookie: hoster.cookie })).body.status !== "unhealthy") {
      if (Date.now() > deadline) throw new Error("the hoster was never marked unhealthy");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await new Promise((resolve) => setTimeout(resolve, PROBE_MS + 50));

    const expected = { status: 503, code: "no_healthy_upstream", type: "api_error" };
    expectSdkError(await failure(scoped.chat.completions.create(hi("auto"))), OpenAI.InternalServerError, expected);
    expectSdkError(
      await failure(scoped.chat.completions.create({ ...hi(hoster.modelId), stream: true })),
      OpenAI.InternalServerError,
      expected,
    );
  });
});
