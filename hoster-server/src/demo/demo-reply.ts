import { createHash } from "node:crypto";
import { countTextTokens } from "@mkt/runtime/tokens";
import type { ChatRequest, DemoTool } from "../chat-request.ts";
import { answerFromText, demoAnswer, promptRandom, type DemoAnswer } from "./demo-text.ts";
import { sampleJson } from "./json-schema-sample.ts";

type Json = Record<string, unknown>;

/** One answer of the demo model in the shapes both wire formats need. */
export interface DemoReply {
  /** What the stream sends, piece by piece (text, a JSON document or tool-call arguments). */
  answer: DemoAnswer;
  /** The first chunk's delta (the role, and for a tool call its id and name). */
  opening: Json;
  /** The delta that carries one piece of `answer`. */
  pieceDelta(piece: string): Json;
  finishReason: "stop" | "length" | "tool_calls";
  /** The non-streamed answer's `message`. */
  message: Json;
  /** Output tokens, counted as the gateway's relay counts them. */
  completionTokens: number;
}

/**
 * The demo model's answer (a demo, documented in hoster-server/README.md), deterministic for a
 * given request:
 * - a call of one tool, with arguments valid against its parameters' schema, when `tools` are
 *   offered and `tool_choice` is `required`, names a function, or is `auto` and the last message
 *   is not a tool result (so a round trip ends: call → result → text);
 * - a JSON document valid against the schema of `response_format` json_schema (json_object: `{}`);
 * - otherwise words from a fixed list.
 */
export function demoReply(chat: ChatRequest, seed: string, completionTokens: number): DemoReply {
  const tool = toolToCall(chat);
  if (tool) return toolCallReply(tool, seed, chat.maxTokens);
  const answer =
    chat.responseSchema === undefined
      ? demoAnswer(seed, completionTokens, chat.maxTokens)
      : answerFromText(JSON.stringify(sampleJson(chat.responseSchema, promptRandom(seed))), chat.maxTokens);
  return {
    answer,
    opening: { role: "assistant", content: "" },
    pieceDelta: (piece) => ({ content: piece }),
    finishReason: answer.finishReason,
    message: { role: "assistant", content: answer.text, refusal: null },
    completionTokens: countTextTokens(answer.text),
  };
}

function toolToCall(chat: ChatRequest): DemoTool | undefined {
  const { tools, toolChoice } = chat;
  if (tools.length === 0 || toolChoice === "none") return undefined;
  if (typeof toolChoice === "object") return tools.find((tool) => tool.name === toolChoice.name);
  const lastRole = chat.messages.at(-1)?.role;
  if (toolChoice === "auto" && (lastRole === "tool" || lastRole === "function")) return undefined;
  return tools[0];
}

function toolCallReply(tool: DemoTool, seed: string, maxTokens: number | undefined): DemoReply {
  const args = JSON.stringify(sampleJson(tool.parameters, promptRandom(seed)));
  const answer = answerFromText(args, maxTokens);
  // Deterministic like the rest of the answer, and shaped like OpenAI's ids.
  const id = `call_${createHash("sha256").update(seed).digest("base64url").slice(0, 24)}`;
  return {
    answer,
    // OpenAI's first chunk of a tool call: no content, the call's id and name, empty arguments.
    opening: {
      role: "assistant",
      content: null,
      tool_calls: [{ index: 0, id, type: "function", function: { name: tool.name, arguments: "" } }],
    },
    pieceDelta: (piece) => ({ tool_calls: [{ index: 0, function: { arguments: piece } }] }),
    finishReason: answer.finishReason === "length" ? "length" : "tool_calls",
    message: {
      role: "assistant",
      content: null,
      tool_calls: [{ id, type: "function", function: { name: tool.name, arguments: answer.text } }],
      refusal: null,
    },
    // The relay counts a call's name and arguments as one text (ChunkAccumulator's budget).
    completionTokens: countTextTokens(tool.name + answer.text),
  };
}
