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
 * - a call of one tool when `tools` are offered and `tool_choice` is `required` or names a
 *   function, or is `auto` and the last message asks for one: a user message saying
 *   `call <tool> <json>` (so a demo can be steered, and an agent's turn is not a tool call every
 *   time; after the tool's result the answer is text, so a round trip ends). The arguments are
 *   the `<json>` given, or else a document valid against the tool's parameters' schema;
 * - a JSON document valid against the schema of `response_format` json_schema (json_object: `{}`);
 * - otherwise words from a fixed list.
 */
export function demoReply(chat: ChatRequest, seed: string, completionTokens: number): DemoReply {
  const call = toolToCall(chat);
  if (call) return toolCallReply(call, seed, chat.maxTokens);
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

/** A tool to call, and the arguments the user asked for (if they did). */
interface ToolCall {
  tool: DemoTool;
  args?: string;
}

function toolToCall(chat: ChatRequest): ToolCall | undefined {
  const { tools, toolChoice } = chat;
  if (tools.length === 0 || toolChoice === "none") return undefined;
  const asked = askedCall(chat);
  if (typeof toolChoice === "object") {
    const tool = tools.find((t) => t.name === toolChoice.name);
    return tool && { tool, args: asked?.tool === tool ? asked.args : undefined };
  }
  if (toolChoice === "required") return asked ?? { tool: tools[0]! };
  return asked;
}

/** `call <tool> <json>` in the last message, when it is the user's and names an offered tool. */
function askedCall(chat: ChatRequest): ToolCall | undefined {
  const last = chat.messages.at(-1);
  if (last?.role !== "user") return undefined;
  const text = messageText(last.content);
  for (const match of text.matchAll(/\bcall\s+([\w.:-]+)/g)) {
    const tool = chat.tools.find((t) => t.name === match[1]);
    if (!tool) continue;
    const rest = text.slice(match.index + match[0].length);
    const open = rest.indexOf("{");
    const close = rest.lastIndexOf("}");
    if (open < 0 || close < open || rest.slice(0, open).trim() !== "") return { tool };
    const json = rest.slice(open, close + 1);
    try {
      const parsed: unknown = JSON.parse(json);
      return parsed && typeof parsed === "object" && !Array.isArray(parsed) ? { tool, args: json } : { tool };
    } catch {
      return { tool };
    }
  }
  return undefined;
}

function messageText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((part: unknown) =>
      part && typeof part === "object" && (part as Json).type === "text" ? String((part as Json).text ?? "") : "",
    )
    .join("\n");
}

function toolCallReply({ tool, args: asked }: ToolCall, seed: string, maxTokens: number | undefined): DemoReply {
  const args = asked ?? JSON.stringify(sampleJson(tool.parameters, promptRandom(seed)));
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
