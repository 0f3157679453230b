import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import { parse } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { root } from "./child-process.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// The gateway's Responses objects and stream events, validated against OpenAI's published
// OpenAPI document (kept beside the repository, not in it): what the official SDKs and agents
// are typed against. Every `$ref` resolves into that document.

const SPEC = join(root, "../shared/fixtures/openai-openapi.yaml");
const absent = !existsSync(SPEC);
if (absent) console.warn(`skipping the OpenAI schema conformance tests: ${SPEC} is absent`);

let system: RunningSystem;
let schemaOf: (name: string) => ValidateFunction;
beforeAll(async () => {
  if (absent) return;
  const doc = parse(readFileSync(SPEC, "utf8")) as Record<string, unknown>;
  // strict: false, as the document carries OpenAPI's keywords (discriminator, x-…, example).
  const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
  ajv.addSchema(doc, "openai");
  schemaOf = (name) => ajv.getSchema(`openai#/components/schemas/${name}`)!;
  system = await startSystem();
});
afterAll(async () => {
  await system?.close();
});

function expectValid(name: string, value: unknown): void {
  const validate = schemaOf(name);
  const valid = validate(value);
  expect(valid ? [] : validate.errors!.slice(0, 3), `${name}: ${JSON.stringify(value).slice(0, 400)}`).toEqual([]);
}

const tools = [
  { type: "function", name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } },
  { type: "custom", name: "apply_patch", description: "A patch, as free text." },
];

async function post(apiKey: string, body: Record<string, unknown>): Promise<Response> {
  return fetch(`${system.url}/v1/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "auto", ...body }),
  });
}

/** Codex CLI's recorded turn (its tools: function, custom, tool_search, web_search), non-streamed. */
const { stream: _stream, ...codexTurn } = JSON.parse(
  readFileSync(join(root, "edge/test/fixtures/codex-turn-request.json"), "utf8"),
) as Record<string, unknown>;

const cases: Array<[string, Record<string, unknown>]> = [
  ["text", { input: "Tell me about schemas.", instructions: "Be brief." }],
  ["a function call", { input: 'call get_weather {"city":"Paris"}', tools }],
  ["a custom tool call", { input: 'call apply_patch {"input":"*** Begin Patch"}', tools }],
  ["Codex CLI's recorded turn", codexTurn],
  ["an answer cut by max_output_tokens", { input: "Say a lot.", max_output_tokens: 16, user: "u-1" }],
];

describe.skipIf(absent)("Responses answers against OpenAI's published schema", () => {
  it.each(cases)("a non-streamed Response with %s is a valid Response", async (_name, body) => {
    const { apiKey } = await signUp(system.url);
    const res = await post(apiKey, body);
    expect(res.status).toBe(200);
    const response = (await res.json()) as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
    expectValid("Response", response);
    expect(response.usage.input_tokens_details).toEqual({ cached_tokens: 0, cache_write_tokens: 0 });
    // What the gateway sent before would not pass: the check has teeth.
    expect(schemaOf("Response")({ ...response, user: null })).toBe(false);
    expect(
      schemaOf("Response")({ ...response, usage: { ...response.usage, input_tokens_details: { cached_tokens: 0 } } }),
    ).toBe(false);
  });

  it.each(cases)("each streamed event of %s is a valid ResponseStreamEvent", async (_name, body) => {
    const { apiKey } = await signUp(system.url);
    const res = await post(apiKey, { ...body, stream: true });
    expect(res.status).toBe(200);
    const events = [...(await res.text()).matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1]!) as { type: string });
    expect(events.length).toBeGreaterThan(3);
    for (const event of events) expectValid("ResponseStreamEvent", event);
  });

  it("the official SDK reads a Response with a custom tool call", async () => {
    const { apiKey } = await signUp(system.url);
    const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey, maxRetries: 0 });
    const response = await client.responses.create({
      model: "auto",
      input: 'call apply_patch {"input":"*** Begin Patch"}',
      tools: tools as never,
    });
    expect(response.output).toEqual([
      expect.objectContaining({ type: "custom_tool_call", name: "apply_patch", input: "*** Begin Patch" }),
    ]);
  });
});
