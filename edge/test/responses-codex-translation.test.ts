import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { chatBodyFromResponses } from "../src/responses/request-translation.ts";
import { responseContext, responseFromCompletion } from "../src/responses/response-object.ts";
import type { ResponsesBody } from "../src/responses/responses-body.ts";
import { ResponseStreamTranslator } from "../src/responses/stream-translation.ts";

// Codex CLI's Responses requests, as recorded from `codex exec` 0.171 (long texts shortened):
// function tools, a `custom` freeform tool (apply_patch, with its Lark grammar), `tool_search`
// and `web_search` (work done on OpenAI's side), reasoning, include, store: false. Its later
// requests send back reasoning items and the calls it ran, with their outputs.
const codexTurn = JSON.parse(
  readFileSync(new URL("./fixtures/codex-turn-request.json", import.meta.url), "utf8"),
) as ResponsesBody;

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const namespaceTool = {
  type: "namespace",
  name: "mcp__docs",
  description: "A documentation server.",
  tools: [
    { type: "function", name: "search", parameters: { type: "object", properties: { q: { type: "string" } } } },
    { type: "custom", name: "note", description: "Free text." },
  ],
};

const events = (frames: string) => [...frames.matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1]!) as Json);

const completion = (message: Json, finish = "tool_calls") =>
  JSON.stringify({
    id: "c",
    object: "chat.completion",
    choices: [{ index: 0, message: { role: "assistant", content: null, ...message }, finish_reason: finish }],
    usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
  });

const call = (id: string, name: string, args: string) => ({
  id,
  type: "function",
  function: { name, arguments: args },
});

describe("Codex CLI's turn as a chat body", () => {
  it("offers its function and custom tools as functions and leaves out what runs on OpenAI's side", () => {
    const chat = chatBodyFromResponses(codexTurn) as Json;
    const names = chat.tools.map((t: Json) => t.function.name);
    expect(names).toContain("exec_command");
    expect(names).toContain("apply_patch");
    expect(names).not.toContain("tool_search");
    expect(names).not.toContain("web_search");
    const patch = chat.tools.find((t: Json) => t.function.name === "apply_patch").function;
    expect(patch.parameters).toEqual({
      type: "object",
      properties: { input: { type: "string", description: "The tool's input, as free text." } },
      required: ["input"],
      additionalProperties: false,
    });
    expect(patch.description).toContain("*** Begin Patch");
    expect(chat).toMatchObject({
      model: "gpt-5.5",
      stream: true,
      tool_choice: "auto",
      parallel_tool_calls: true,
      reasoning_effort: "medium",
      prompt_cache_key: codexTurn.prompt_cache_key,
    });
    expect(chat).not.toHaveProperty("include");
    expect(chat).not.toHaveProperty("store");
    expect(chat.messages.map((m: Json) => m.role)).toEqual(["developer", "developer", "user", "user"]);
    expect(chat.messages.at(-1).content).toEqual([{ type: "text", text: "hello there" }]);
  });

  it("reads back the reasoning, calls and outputs of a later request", () => {
    const input = codexTurn.input as Json[];
    const later = {
      ...codexTurn,
      tools: [...(codexTurn.tools ?? []), namespaceTool],
      input: [
        ...input,
        { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "gAAAA…" },
        { type: "custom_tool_call", id: "ctc_1", call_id: "call_1", name: "apply_patch", input: "*** Begin Patch\n" },
        {
          type: "function_call",
          id: "fc_2",
          call_id: "call_2",
          namespace: "mcp__docs",
          name: "search",
          arguments: '{"q":"x"}',
        },
        { type: "custom_tool_call_output", call_id: "call_1", output: "Done!" },
        { type: "function_call_output", call_id: "call_2", output: [{ type: "input_text", text: "found" }] },
      ],
    } as ResponsesBody;
    const chat = chatBodyFromResponses(later) as Json;
    expect(chat.messages.slice(input.length)).toEqual([
      {
        role: "assistant",
        content: null,
        tool_calls: [
          call("call_1", "apply_patch", JSON.stringify({ input: "*** Begin Patch\n" })),
          call("call_2", "mcp__docs__search", '{"q":"x"}'),
        ],
      },
      { role: "tool", tool_call_id: "call_1", content: "Done!" },
      { role: "tool", tool_call_id: "call_2", content: "found" },
    ]);
    expect(chat.tools.map((t: Json) => t.function.name)).toEqual(
      expect.arrayContaining(["mcp__docs__search", "mcp__docs__note"]),
    );
  });

  it("refuses a built-in tool the model would need OpenAI to run, naming it", () => {
    const refused = () =>
      chatBodyFromResponses({ model: "m", input: "hi", tools: [{ type: "code_interpreter", container: "auto" }] });
    expect(refused).toThrow(expect.objectContaining({ code: "invalid_request", param: "tools[0].type" }));
  });
});

describe("a chat answer read back into Codex's item types", () => {
  const request = {
    model: "m",
    input: "hi",
    tools: [{ type: "custom", name: "apply_patch" }, namespaceTool],
  } as ResponsesBody;
  const ctx = () => responseContext("req1", "demo-agent", request);
  const calls = [
    call("call_a", "apply_patch", JSON.stringify({ input: "*** Begin Patch\n*** End Patch" })),
    call("call_b", "mcp__docs__search", '{"q":"x"}'),
  ];

  it("a custom tool's call is a custom_tool_call with its input; a namespaced one names its namespace", () => {
    const response = JSON.parse(
      JSON.stringify(responseFromCompletion(ctx(), completion({ tool_calls: calls }))),
    ) as Json;
    expect(response.output).toEqual([
      expect.objectContaining({
        type: "custom_tool_call",
        call_id: "call_a",
        name: "apply_patch",
        input: "*** Begin Patch\n*** End Patch",
      }),
      expect.objectContaining({
        type: "function_call",
        call_id: "call_b",
        namespace: "mcp__docs",
        name: "search",
        arguments: '{"q":"x"}',
      }),
    ]);
    expect(response.usage.input_tokens_details).toEqual({ cached_tokens: 0, cache_write_tokens: 0 });
    expect(response).not.toHaveProperty("user");
  });

  it("streams a custom tool's input whole when its call ends", () => {
    const translator = new ResponseStreamTranslator(ctx());
    const chunk = (delta: Json, finish: string | null = null) =>
      JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] });
    const args = JSON.stringify({ input: "*** Begin Patch\n" });
    const frames =
      translator.chunks([
        chunk({
          role: "assistant",
          content: null,
          tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "apply_patch", arguments: "" } }],
        }),
        chunk({ tool_calls: [{ index: 0, function: { arguments: args.slice(0, 5) } }] }),
        chunk({ tool_calls: [{ index: 0, function: { arguments: args.slice(5) } }] }, "tool_calls"),
      ]) + translator.end();
    const stream = events(frames);
    expect(stream.map((e) => e.type)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.custom_tool_call_input.delta",
      "response.custom_tool_call_input.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(stream[2]!.item).toMatchObject({ type: "custom_tool_call", name: "apply_patch", input: "" });
    expect(stream[4]).toMatchObject({ input: "*** Begin Patch\n", item_id: stream[2]!.item.id });
    expect(stream[5]!.item).toMatchObject({ type: "custom_tool_call", call_id: "call_a", input: "*** Begin Patch\n" });
  });
});
