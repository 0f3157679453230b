import { createHash } from "node:crypto";
import { countTextTokens } from "@mkt/runtime/tokens";
import type { ChatRequest } from "../chat-request.ts";
import { askedCall, type ToolCall } from "./asked-call.ts";
import { demoReasoning } from "./demo-reasoning.ts";
import { answerFromText, demoAnswer, promptRandom, type DemoAnswer } from "./demo-text.ts";
import { sampleJson } from "./json-schema-sample.ts";

type Json = Record<string, unknown>;

/** One delta of a streamed answer and the output tokens it carries (what pacing waits for). */
export interface StreamDelta {
  delta: Json;
  tokens: number;
}

/** One answer of the demo model in the shapes both wire formats need. */
export interface DemoReply {
  /** The first chunk's delta (the role, and for a tool call without reasoning its id and name). */
  opening: Json;
  /** What the stream sends after the opening, in order: reasoning, then text, JSON or arguments. */
  deltas: StreamDelta[];
  finishReason: "stop" | "length" | "tool_calls";
  /** The non-streamed answer's `message`. */
  message: Json;
  /** Output tokens, reasoning included, counted as the gateway's relay counts them. */
  completionTokens: number;
  /** The part of `completionTokens` that is reasoning. */
  reasoningTokens: number;
}

/** The answer proper (text, JSON or a tool call), before any reasoning is put in front of it. */
interface Output {
  answer: DemoAnswer;
  opening: Json;
  pieceDelta(piece: string): Json;
  finishReason: DemoReply["finishReason"];
  message: Json;
  /** The output as the relay reads it: a call's name and arguments as one text. */
  outputText: string;
}

/**
 * The demo model's answer (a demo, documented in hoster-server/README.md), deterministic for a
 * given request:
 * - a call of one tool when `tools` are offered and `tool_choice` is `required` or names a
 *   function, or is `auto` and the message it answers asks for one: a user message saying
 *   `call <tool> <json>` (so a demo can be steered, and an agent's turn is not a tool call every
 *   time; after the tool's result the answer is text, so a round trip ends). The arguments are
 *   the `<json>` given, or else a document valid against the tool's parameters' schema;
 * - a JSON document valid against the schema of `response_format` json_schema (json_object: `{}`);
 * - otherwise words from a fixed list.
 * Asked for reasoning, it first reasons in a short sentence of its own; `max_tokens` bounds the
 * reasoning and the answer together.
 */
export function demoReply(chat: ChatRequest, seed: string, completionTokens: number): DemoReply {
  if (!chat.reasoning) return assemble(output(chat, seed, completionTokens, chat.maxTokens));
  const reasoning = demoReasoning(seed, chat.maxTokens);
  const room = chat.maxTokens === undefined ? undefined : chat.maxTokens - sum(reasoning.pieceTokens);
  const answer =
    reasoning.finishReason === "length" || room === 0
      ? textOutput({ pieces: [], pieceTokens: [], text: "", finishReason: "length" })
      : output(chat, seed, completionTokens, room);
  return assemble(answer, reasoning);
}

function output(chat: ChatRequest, seed: string, completionTokens: number, maxTokens: number | undefined): Output {
  const call = toolToCall(chat);
  if (call) return toolCallOutput(call, seed, maxTokens);
  return textOutput(
    chat.responseSchema === undefined
      ? demoAnswer(seed, completionTokens, maxTokens)
      : answerFromText(JSON.stringify(sampleJson(chat.responseSchema, promptRandom(seed))), maxTokens),
  );
}

function assemble(output: Output, reasoning?: DemoAnswer): DemoReply {
  const { answer, opening, message } = output;
  const answerDeltas = answer.pieces.map((piece, i) => ({
    delta: output.pieceDelta(piece),
    tokens: answer.pieceTokens[i]!,
  }));
  if (!reasoning) {
    return {
      opening,
      deltas: answerDeltas,
      finishReason: output.finishReason,
      message,
      completionTokens: countTextTokens(output.outputText),
      reasoningTokens: 0,
    };
  }
  // A tool call opens once the reasoning is done, as a reasoning model's does.
  const { tool_calls: callOpening, ...role } = opening;
  return {
    opening: role,
    deltas: [
      ...reasoning.pieces.map((piece, i) => ({
        delta: { reasoning_content: piece },
        tokens: reasoning.pieceTokens[i]!,
      })),
      ...(callOpening ? [{ delta: { tool_calls: callOpening }, tokens: 0 }] : []),
      ...answerDeltas,
    ],
    finishReason: output.finishReason,
    // vLLM's field, where its reasoning parsers put a reasoning model's thinking.
    message: { role: message.role, content: message.content, reasoning_content: reasoning.text, ...message },
    // The relay counts a choice's reasoning and answer as one text; the reasoning's closing
    // newline keeps that count the sum of the two.
    completionTokens: countTextTokens(reasoning.text + output.outputText),
    reasoningTokens: countTextTokens(reasoning.text),
  };
}

function sum(values: readonly number[]): number {
  return values.reduce((a, b) => a + b, 0);
}

function textOutput(answer: DemoAnswer): Output {
  return {
    answer,
    opening: { role: "assistant", content: "" },
    pieceDelta: (piece) => ({ content: piece }),
    finishReason: answer.finishReason,
    message: { role: "assistant", content: answer.text, refusal: null },
    outputText: answer.text,
  };
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

function toolCallOutput({ tool, args: asked }: ToolCall, seed: string, maxTokens: number | undefined): Output {
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
    outputText: tool.name + answer.text,
  };
}
