import { describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { messageContext } from "../src/messages/message-object.ts";
import { chatBodyFromMessages } from "../src/messages/request-translation.ts";
import { MessageStreamTranslator } from "../src/messages/stream-translation.ts";

const events = (frames: string) =>
  [...frames.matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1]!) as { type: string; [k: string]: unknown });

describe("a Messages request as a chat body", () => {
  it("puts tool results right after the calls, before the user's other blocks, and maps tool_choice", () => {
    const chat = chatBodyFromMessages({
      model: "m",
      max_tokens: 10,
      system: [{ type: "text", text: "Be brief.", cache_control: { type: "ephemeral" } }],
      tools: [{ name: "f", input_schema: { type: "object" } }],
      tool_choice: { type: "any", disable_parallel_tool_use: true },
      stop_sequences: ["END"],
      messages: [
        { role: "user", content: "call f" },
        {
          role: "assistant",
          content: [
            { type: "thinking", thinking: "…", signature: "s" },
            { type: "tool_use", id: "t1", name: "f", input: { a: 1 } },
          ],
        },
        {
          role: "user",
          content: [
            { type: "text", text: "and then?" },
            { type: "tool_result", tool_use_id: "t1", content: [{ type: "text", text: "ok" }], is_error: true },
          ],
        },
      ],
    });
    expect(chat).toEqual({
      model: "m",
      max_tokens: 10,
      stop: ["END"],
      tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }],
      tool_choice: "required",
      parallel_tool_calls: false,
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: [{ type: "text", text: "call f" }] },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: "t1", type: "function", function: { name: "f", arguments: '{"a":1}' } }],
        },
        { role: "tool", tool_call_id: "t1", content: "Error: ok" },
        { role: "user", content: [{ type: "text", text: "and then?" }] },
      ],
    });
  });

  it("refuses what runs on Anthropic's side or lives in its Files API, naming the field", () => {
    const refused = (body: object) => {
      try {
        chatBodyFromMessages({ model: "m", max_tokens: 1, messages: [{ role: "user", content: "hi" }], ...body });
      } catch (err) {
        return (err as AppError).param;
      }
    };
    expect(refused({ tools: [{ type: "web_search_20250305", name: "web_search" }] })).toBe("tools[0].type");
    expect(
      refused({
        messages: [{ role: "user", content: [{ type: "image", source: { type: "file", file_id: "file_1" } }] }],
      }),
    ).toBe("messages[0].content[0].source.type");
    expect(refused({ tool_choice: { type: "tool", name: "f" } })).toBe("tool_choice");
    expect(
      refused({ messages: [{ role: "system", content: [{ type: "image", source: { type: "url", url: "u" } }] }] }),
    ).toBe("messages[0].content[0].type");
  });

  it("keeps a system message where it stands and asks for reasoning at the effort given", () => {
    const chat = chatBodyFromMessages({
      model: "m",
      max_tokens: 64_000,
      system: "Be brief.",
      thinking: { type: "adaptive" },
      output_config: { effort: "high" },
      context_management: { edits: [{ type: "clear_thinking_20251015", keep: "all" }] },
      metadata: { user_id: "u" },
      messages: [
        { role: "user", content: [{ type: "text", text: "hi", cache_control: { type: "ephemeral" } }] },
        { role: "system", content: "Agent types: one." },
      ],
    });
    expect(chat).toEqual({
      model: "m",
      max_tokens: 64_000,
      reasoning_effort: "high",
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: [{ type: "text", text: "hi" }] },
        { role: "system", content: "Agent types: one." },
      ],
    });
  });

  it("maps thinking and effort to reasoning_effort: thinking off asks for none, an unknown effort is left out", () => {
    const effort = (fields: object) =>
      chatBodyFromMessages({ model: "m", max_tokens: 1, messages: [{ role: "user", content: "hi" }], ...fields })
        .reasoning_effort;
    expect(effort({ thinking: { type: "enabled", budget_tokens: 1024 } })).toBe("medium");
    expect(effort({ thinking: { type: "adaptive" } })).toBe("medium");
    expect(effort({ thinking: { type: "adaptive" }, output_config: { effort: "max" } })).toBe("high");
    expect(effort({ output_config: { effort: "low" } })).toBe("low");
    expect(effort({ thinking: { type: "disabled" }, output_config: { effort: "high" } })).toBeUndefined();
    expect(effort({ output_config: { effort: "ultra" } })).toBeUndefined();
    expect(effort({})).toBeUndefined();
  });
});

describe("the Messages event stream from chat chunks", () => {
  it("opens a block per text run and tool call, and ends with message_delta and message_stop", () => {
    const stream = new MessageStreamTranslator(messageContext("r1", "demo"));
    const chunk = (delta: object, finish?: string) =>
      JSON.stringify({ choices: [{ index: 0, delta, finish_reason: finish ?? null }] });
    const frames =
      stream.chunks([
        chunk({ role: "assistant", content: "Hi" }),
        chunk({ tool_calls: [{ index: 0, id: "c1", function: { name: "f", arguments: '{"a"' } }] }),
        chunk({ tool_calls: [{ index: 0, function: { arguments: ":1}" } }] }, "tool_calls"),
        JSON.stringify({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 7, cost: 0.1 } }),
      ]) + stream.end();
    expect(events(frames).map((e) => e.type)).toEqual([
      "message_start",
      "ping",
      "content_block_start",
      "content_block_delta",
      "content_block_stop",
      "content_block_start",
      "content_block_delta",
      "content_block_delta",
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    expect(events(frames).at(-2)).toEqual({
      type: "message_delta",
      delta: { stop_reason: "tool_use", stop_sequence: null },
      usage: {
        input_tokens: 5,
        output_tokens: 7,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        cost: 0.1,
      },
    });
  });

  it("ends a stream that fails after its start with Anthropic's error event", () => {
    const stream = new MessageStreamTranslator(messageContext("r1", "demo"));
    stream.chunks([JSON.stringify({ choices: [{ index: 0, delta: { content: "Hi" } }] })]);
    const failure = stream.failure(new AppError("upstream_timeout", "The model server timed out."));
    expect(failure.startsWith("event: error\n")).toBe(true);
    expect(events(failure)).toEqual([
      {
        type: "error",
        error: { type: "timeout_error", message: "The model server timed out.", param: null, code: "upstream_timeout" },
      },
    ]);
  });
});
