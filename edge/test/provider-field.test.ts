import Fastify, { type FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chatBodySchema, type ChatBody } from "../src/chat/chat-body.ts";
import { installAnthropicErrorHandler } from "../src/messages/anthropic-errors.ts";
import { messagesBodySchema, type MessagesBody } from "../src/messages/messages-body.ts";
import { installErrorHandler } from "../src/plugins/error-handler.ts";
import { installJsonBodyParser } from "../src/plugins/json-body.ts";
import { installValidation } from "../src/plugins/validation.ts";
import { responsesBodySchema, type ResponsesBody } from "../src/responses/responses-body.ts";
import { providerPreferences } from "../src/routing/provider-preferences.ts";

// `provider` as the three routing APIs check it: by their body schemas, with the edge's own
// validation and error plugins, each route answering with the preferences it read.
let app: FastifyInstance;
beforeAll(async () => {
  app = Fastify();
  installJsonBodyParser(app);
  installValidation(app);
  installErrorHandler(app);
  app.post<{ Body: ChatBody }>("/chat", { schema: { body: chatBodySchema } }, async (request) =>
    providerPreferences(request.body.provider),
  );
  app.post<{ Body: ResponsesBody }>("/responses", { schema: { body: responsesBodySchema } }, async (request) =>
    providerPreferences(request.body.provider),
  );
  await app.register(async (scope) => {
    installAnthropicErrorHandler(scope);
    scope.post<{ Body: MessagesBody }>("/messages", { schema: { body: messagesBodySchema } }, async (request) =>
      providerPreferences(request.body.provider),
    );
  });
  await app.ready();
});
afterAll(() => app.close());

const BODIES = {
  chat: { model: "m", messages: [{ role: "user", content: "hi" }] },
  responses: { model: "m", input: "hi" },
  messages: { model: "m", max_tokens: 16, messages: [{ role: "user", content: "hi" }] },
};

async function send(api: keyof typeof BODIES, provider: unknown) {
  const res = await app.inject({ method: "POST", url: `/${api}`, payload: { ...BODIES[api], provider } });
  return { status: res.statusCode, body: res.json() };
}

/** The `param` a chat request with this `provider` is refused with; undefined when it is accepted. */
async function refusedParam(provider: unknown): Promise<string | undefined> {
  const { status, body } = await send("chat", provider);
  if (status === 200) return undefined;
  expect(status).toBe(400);
  expect(body.error).toMatchObject({ type: "invalid_request_error", code: "invalid_request" });
  return body.error.param;
}

describe("a request's provider field", () => {
  it("is read into routing preferences: names lowered, nulls as no preference", async () => {
    const provider = {
      order: ["Hoster 4"],
      only: ["ACME", "hoster 4"],
      ignore: null,
      allow_fallbacks: false,
      sort: "price",
      max_price: { prompt: 2, completion: null },
      quantizations: ["FP8"],
    };
    expect((await send("chat", provider)).body).toEqual({
      order: ["hoster 4"],
      only: ["acme", "hoster 4"],
      allowFallbacks: false,
      sort: "price",
      maxPrice: { prompt: 2 },
      quantizations: ["fp8"],
    });
    for (const none of [undefined, null, {}, { allow_fallbacks: null, sort: null }]) {
      expect((await send("chat", none)).body).toEqual({ allowFallbacks: true });
    }
  });

  it("refuses unknown and malformed fields with a 400 naming them", async () => {
    expect(await refusedParam({ data_collection: "deny" })).toBe("provider.data_collection");
    expect(await refusedParam({ sort: "fastest" })).toBe("provider.sort");
    expect(await refusedParam({ max_price: { request: 1 } })).toBe("provider.max_price.request");
    expect(await refusedParam({ max_price: { prompt: -1 } })).toBe("provider.max_price.prompt");
    expect(await refusedParam({ max_price: [] })).toBe("provider.max_price");
    expect(await refusedParam({ only: "acme" })).toBe("provider.only");
    expect(await refusedParam({ only: [""] })).toBe("provider.only[0]");
    expect(await refusedParam({ order: Array.from({ length: 65 }, (_, i) => `h${i}`) })).toBe("provider.order");
    expect(await refusedParam({ allow_fallbacks: "no" })).toBe("provider.allow_fallbacks");
    expect(await refusedParam([])).toBe("provider");
    expect(await refusedParam("acme")).toBe("provider");
  });

  it("says what is wrong in the message", async () => {
    const { body } = await send("chat", { data_collection: "deny" });
    expect(body.error.message).toContain("provider.data_collection");
    expect((await send("chat", { sort: "fastest" })).body.error.message).toMatch(/provider\.sort.*allowed values/);
  });

  it("is checked alike on the Responses and Messages APIs, in their error shapes", async () => {
    const responses = await send("responses", { sort: "fastest" });
    expect(responses.status).toBe(400);
    expect(responses.body.error).toMatchObject({ type: "invalid_request_error", param: "provider.sort" });
    const messages = await send("messages", { ignore: [3] });
    expect(messages.status).toBe(400);
    expect(messages.body).toMatchObject({
      type: "error",
      error: { type: "invalid_request_error", param: "provider.ignore[0]" },
    });
    expect((await send("messages", { sort: "latency" })).body).toEqual({ allowFallbacks: true, sort: "latency" });
  });
});
