import type { AppError } from "@mkt/runtime/errors";
import type { AnswerFormat } from "../chat/answer-format.ts";
import {
  functionCallItemId,
  messageItem,
  messageItemId,
  outputTextPart,
  reasoningItem,
  reasoningItemId,
  refusalPart,
  summaryTextPart,
  responseFromCompletion,
  responseObject,
  responseUsage,
  statusOf,
  toolCallItem,
  toolOrigin,
  type ResponseContext,
} from "./response-object.ts";
import { firstChunkChoice, isObject, reasoningText, type Json } from "../translation/chat-json.ts";

/** The message item being streamed: its parts (output_text, then maybe refusal) in order. */
interface OpenMessage {
  outputIndex: number;
  itemId: string;
  parts: Array<{ kind: "output_text" | "refusal"; text: string }>;
}

/** The reasoning item being streamed: its one summary part's text so far. */
interface OpenReasoning {
  outputIndex: number;
  itemId: string;
  text: string;
}

interface OpenCall {
  outputIndex: number;
  itemId: string;
  callId: string;
  /** The chat function's name (a namespaced tool's joined name). */
  name: string;
  arguments: string;
}

/**
 * The Responses API's stream, from the registry's chat.completion.chunks: response.created and
 * response.in_progress with the first chunk; then for text output_item.added,
 * content_part.added, output_text.delta..., and for each tool call output_item.added,
 * function_call_arguments.delta... (a custom tool's call: its whole input in one
 * custom_tool_call_input.delta when it ends, as the input is read out of the arguments' JSON);
 * each item closed (…done events) when the next begins or the
 * answer ends; then response.completed, or response.incomplete when the output cap cut it, or
 * response.failed for a failure after the start. Every event has its `sequence_number`, as
 * OpenAI documents; no `[DONE]` follows (OpenAI sends none on this API).
 *
 * Only the first choice is read: the translated request never asks for more.
 */
export class ResponseStreamTranslator implements AnswerFormat {
  readonly #ctx: ResponseContext;
  #sequence = 0;
  #started = false;
  /** Every item, in output order, as it stands now. */
  readonly #output: Json[] = [];
  #message: OpenMessage | undefined;
  #reasoning: OpenReasoning | undefined;
  #call: OpenCall | undefined;
  /** Tool calls by their chat index. */
  readonly #callsByIndex = new Map<number, OpenCall>();
  #finishReason: unknown;
  #usage: unknown;

  constructor(ctx: ResponseContext) {
    this.#ctx = ctx;
  }

  completion(completion: string): string {
    return JSON.stringify(responseFromCompletion(this.#ctx, completion));
  }

  chunks(chunks: readonly string[]): string {
    let frames = this.#start();
    for (const text of chunks) frames += this.#chunk(JSON.parse(text));
    return frames;
  }

  end(): string {
    let frames = this.#start();
    const { status, incompleteReason } = statusOf(this.#finishReason);
    const itemStatus = status === "incomplete" ? "incomplete" : "completed";
    // An answer with no text and no call still has its (empty) message, as a non-streamed one does.
    if (this.#output.every((item) => item.type === "reasoning")) {
      frames += this.#closeReasoning(itemStatus) + this.#openMessage("output_text");
    }
    frames += this.#closeReasoning(itemStatus) + this.#closeMessage(itemStatus) + this.#closeCall(itemStatus);
    const type = status === "incomplete" ? "response.incomplete" : "response.completed";
    const response = responseObject(this.#ctx, {
      status,
      output: this.#output,
      usage: responseUsage(this.#usage),
      incompleteReason,
    });
    return frames + this.#event(type, { response });
  }

  failure(error: AppError): string {
    const response = responseObject(this.#ctx, {
      status: "failed",
      output: this.#output,
      error: { code: error.code, message: error.message },
    });
    return this.#start() + this.#event("response.failed", { response });
  }

  #event(type: string, fields: Json): string {
    const payload = { type, sequence_number: this.#sequence++, ...fields };
    return `event: ${type}\ndata: ${JSON.stringify(payload)}\n\n`;
  }

  #start(): string {
    if (this.#started) return "";
    this.#started = true;
    const response = responseObject(this.#ctx, { status: "in_progress", output: [] });
    return this.#event("response.created", { response }) + this.#event("response.in_progress", { response });
  }

  #chunk(chunk: unknown): string {
    if (!isObject(chunk)) return "";
    if (isObject(chunk.usage)) this.#usage = chunk.usage;
    const choice = firstChunkChoice(chunk);
    if (!choice) return "";
    if (typeof choice.finish_reason === "string") this.#finishReason = choice.finish_reason;
    const delta = isObject(choice.delta) ? choice.delta : {};
    let frames = "";
    const reasoning = reasoningText(delta);
    if (reasoning !== "") frames += this.#reasoningDelta(reasoning);
    if (typeof delta.content === "string" && delta.content !== "") frames += this.#text("output_text", delta.content);
    if (typeof delta.refusal === "string" && delta.refusal !== "") frames += this.#text("refusal", delta.refusal);
    if (Array.isArray(delta.tool_calls)) {
      for (const call of delta.tool_calls) if (isObject(call)) frames += this.#toolCallDelta(call);
    }
    return frames;
  }

  /**
   * A reasoning delta: the reasoning item opens (its one summary part with it) before the text or
   * calls it precedes, and its summary text grows, as OpenAI streams a reasoning summary.
   */
  #reasoningDelta(text: string): string {
    let frames = "";
    if (!this.#reasoning) {
      frames += this.#closeMessage("completed") + this.#closeCall("completed");
      const outputIndex = this.#output.length;
      const open = { outputIndex, itemId: reasoningItemId(this.#ctx, outputIndex), text: "" };
      this.#reasoning = open;
      const item = reasoningItem(open.itemId, "in_progress", undefined);
      this.#output.push(item);
      const where = { item_id: open.itemId, output_index: outputIndex, summary_index: 0 };
      frames +=
        this.#event("response.output_item.added", { output_index: outputIndex, item }) +
        this.#event("response.reasoning_summary_part.added", { ...where, part: summaryTextPart("") });
    }
    const open = this.#reasoning;
    open.text += text;
    const where = { item_id: open.itemId, output_index: open.outputIndex, summary_index: 0 };
    return frames + this.#event("response.reasoning_summary_text.delta", { ...where, delta: text });
  }

  #closeReasoning(status: string): string {
    const open = this.#reasoning;
    if (!open) return "";
    this.#reasoning = undefined;
    const item = reasoningItem(open.itemId, status, open.text);
    this.#output[open.outputIndex] = item;
    const where = { item_id: open.itemId, output_index: open.outputIndex, summary_index: 0 };
    return (
      this.#event("response.reasoning_summary_text.done", { ...where, text: open.text }) +
      this.#event("response.reasoning_summary_part.done", { ...where, part: summaryTextPart(open.text) }) +
      this.#event("response.output_item.done", { output_index: open.outputIndex, item })
    );
  }

  #text(kind: "output_text" | "refusal", text: string): string {
    let frames = this.#closeReasoning("completed") + this.#closeCall("completed");
    if (!this.#message) frames += this.#openMessage(kind);
    const message = this.#message!;
    if (message.parts.at(-1)!.kind !== kind) frames += this.#closePart() + this.#openPart(kind);
    const part = message.parts.at(-1)!;
    part.text += text;
    const where = { item_id: message.itemId, output_index: message.outputIndex };
    const contentIndex = message.parts.length - 1;
    if (kind === "refusal") {
      return frames + this.#event("response.refusal.delta", { ...where, content_index: contentIndex, delta: text });
    }
    return (
      frames +
      this.#event("response.output_text.delta", { ...where, content_index: contentIndex, delta: text, logprobs: [] })
    );
  }

  #openMessage(kind: "output_text" | "refusal"): string {
    const outputIndex = this.#output.length;
    this.#message = { outputIndex, itemId: messageItemId(this.#ctx, outputIndex), parts: [] };
    const item = messageItem(this.#message.itemId, "in_progress", []);
    this.#output.push(item);
    return (
      this.#event("response.output_item.added", { output_index: this.#message.outputIndex, item }) +
      this.#openPart(kind)
    );
  }

  #openPart(kind: "output_text" | "refusal"): string {
    const message = this.#message!;
    message.parts.push({ kind, text: "" });
    return this.#event("response.content_part.added", {
      item_id: message.itemId,
      output_index: message.outputIndex,
      content_index: message.parts.length - 1,
      part: kind === "refusal" ? refusalPart("") : outputTextPart(""),
    });
  }

  #closePart(): string {
    const message = this.#message!;
    const contentIndex = message.parts.length - 1;
    const { kind, text } = message.parts[contentIndex]!;
    const where = { item_id: message.itemId, output_index: message.outputIndex, content_index: contentIndex };
    const part = kind === "refusal" ? refusalPart(text) : outputTextPart(text);
    const done =
      kind === "refusal"
        ? this.#event("response.refusal.done", { ...where, refusal: text })
        : this.#event("response.output_text.done", { ...where, text, logprobs: [] });
    return done + this.#event("response.content_part.done", { ...where, part });
  }

  #closeMessage(status: string): string {
    const message = this.#message;
    if (!message) return "";
    let frames = this.#closePart();
    const content = message.parts.map((p) => (p.kind === "refusal" ? refusalPart(p.text) : outputTextPart(p.text)));
    const item = messageItem(message.itemId, status, content);
    this.#output[message.outputIndex] = item;
    frames += this.#event("response.output_item.done", { output_index: message.outputIndex, item });
    this.#message = undefined;
    return frames;
  }

  #toolCallDelta(delta: Json): string {
    const index = typeof delta.index === "number" ? delta.index : this.#callsByIndex.size;
    const fn = isObject(delta.function) ? delta.function : {};
    let frames = "";
    let call = this.#callsByIndex.get(index);
    if (!call) {
      frames += this.#closeReasoning("completed") + this.#closeMessage("completed") + this.#closeCall("completed");
      call = {
        outputIndex: this.#output.length,
        itemId: functionCallItemId(this.#ctx, this.#callsByIndex.size),
        callId: typeof delta.id === "string" ? delta.id : "",
        name: typeof fn.name === "string" ? fn.name : "",
        arguments: "",
      };
      this.#callsByIndex.set(index, call);
      this.#call = call;
      const item = toolCallItem(call.itemId, "in_progress", toolOrigin(this.#ctx, call.name), {
        callId: call.callId,
        arguments: "",
      });
      this.#output.push(item);
      frames += this.#event("response.output_item.added", { output_index: call.outputIndex, item });
    } else if (typeof fn.name === "string") {
      call.name += fn.name; // a name sent in pieces; OpenAI and the demo send it whole, first
    }
    if (typeof fn.arguments === "string" && fn.arguments !== "") {
      call.arguments += fn.arguments;
      if (toolOrigin(this.#ctx, call.name).kind === "custom") return frames;
      frames += this.#event("response.function_call_arguments.delta", {
        item_id: call.itemId,
        output_index: call.outputIndex,
        delta: fn.arguments,
      });
    }
    return frames;
  }

  #closeCall(status: string): string {
    const call = this.#call;
    if (!call) return "";
    this.#call = undefined;
    const origin = toolOrigin(this.#ctx, call.name);
    const item = toolCallItem(call.itemId, status, origin, call);
    this.#output[call.outputIndex] = item;
    const where = { item_id: call.itemId, output_index: call.outputIndex };
    const done = { output_index: call.outputIndex, item };
    if (item.type === "custom_tool_call") {
      const input = item.input as string;
      return (
        (input === "" ? "" : this.#event("response.custom_tool_call_input.delta", { ...where, delta: input })) +
        this.#event("response.custom_tool_call_input.done", { ...where, input }) +
        this.#event("response.output_item.done", done)
      );
    }
    return (
      this.#event("response.function_call_arguments.done", { ...where, name: origin.name, arguments: call.arguments }) +
      this.#event("response.output_item.done", done)
    );
  }
}
