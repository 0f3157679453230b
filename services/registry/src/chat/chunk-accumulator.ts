import { randomToken } from "@mkt/runtime/ids";
import { countTextTokens } from "@mkt/runtime/tokens";
import type { BilledUsage, ReportedUsage } from "./billed-usage.ts";
import { OutputBudget } from "./output-budget.ts";
import { UpstreamFailure } from "../upstream/stream-chat.ts";

type Json = Record<string, unknown>;

interface ToolCallState {
  id: string;
  type: string;
  name: string;
  arguments: string;
}

interface ChoiceState {
  content: string;
  refusal: string;
  sawContent: boolean;
  toolCalls: Map<number, ToolCallState>;
  finishReason: string | null;
  logprobs: unknown[] | undefined;
  /** Some of its text was cut at the output limit. */
  cut: boolean;
}

const isObject = (v: unknown): v is Json => !!v && typeof v === "object" && !Array.isArray(v);

/**
 * Reads upstream chat.completion.chunk payloads: rewrites each for the caller (model name, no
 * usage), remembers the upstream's usage report, collects the text delivered (for counting
 * output tokens) and assembles the equivalent chat.completion for non-streaming callers.
 * Text past `outputLimit` tokens is cut (OutputBudget): `atLimit` then tells the caller to stop
 * reading and `closeAtLimit` finishes the open choices with `length`.
 */
export class ChunkAccumulator {
  readonly #modelId: string;
  #id: string | undefined;
  #created: number | undefined;
  #systemFingerprint: string | undefined;
  readonly #choices = new Map<number, ChoiceState>();
  // Everything the caller receives as text: content, reasoning, refusals, tool names and arguments.
  readonly #delivered: OutputBudget;
  reportedUsage: ReportedUsage | undefined;
  /** Changes made to upstream chunks so far (relayText relays an unchanged one verbatim). */
  #rewrites = 0;
  /** True once any choice carried a finish_reason: the answer is complete, not truncated. */
  finished = false;

  constructor(modelId: string, outputLimit: number) {
    this.#modelId = modelId;
    this.#delivered = new OutputBudget(outputLimit);
  }

  /** Output tokens the caller may receive in all. */
  get outputLimit(): number {
    return this.#delivered.limit;
  }

  /** The output limit was reached: nothing more may be relayed. */
  get atLimit(): boolean {
    return this.#delivered.exhausted;
  }

  /** Every choice seen has finished: only a usage report may still follow. */
  get #complete(): boolean {
    return this.#choices.size > 0 && [...this.#choices.values()].every((c) => c.finishReason !== null);
  }

  get id(): string {
    return (this.#id ??= `chatcmpl-${randomToken(18)}`);
  }

  get created(): number {
    return (this.#created ??= Math.floor(Date.now() / 1000));
  }

  /**
   * Takes one SSE data payload and returns the JSON text to relay, or undefined when it has no
   * choices. A chunk that needs no change (already under the route's model name, no usage report,
   * nothing cut) is relayed as the upstream wrote it: a stream is relayed without serializing
   * every chunk again, the bulk of a long stream's cost.
   */
  relayText(data: string): string | undefined {
    const rewrites = this.#rewrites;
    const chunk = this.accept(data);
    if (!chunk) return undefined;
    // A payload spread over several `data:` lines holds line breaks; one SSE line may not.
    const verbatim = this.#rewrites === rewrites && !data.includes("\n") && !data.includes("\r");
    return verbatim ? data : JSON.stringify(chunk);
  }

  /** Takes one SSE data payload; returns the chunk to relay, or undefined when it has no choices. */
  accept(data: string): Json | undefined {
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      chunk = undefined;
    }
    const choices = isObject(chunk) && Array.isArray(chunk.choices) ? chunk.choices : [];
    if (!isObject(chunk) || (chunk.error !== undefined && choices.length === 0)) {
      // After every choice finished the answer is whole and only an (untrusted) usage report is
      // awaited, so a broken trailer (Python servers write NaN into JSON) costs nothing.
      if (this.#complete) return undefined;
      throw new UpstreamFailure(
        "upstream_error",
        isObject(chunk) ? "upstream reported an error mid-stream" : "upstream sent a chunk that is not a JSON object",
      );
    }
    if (typeof chunk.id === "string" && this.#id === undefined) this.#id = chunk.id;
    if (typeof chunk.created === "number" && this.#created === undefined) this.#created = chunk.created;
    if (typeof chunk.system_fingerprint === "string") this.#systemFingerprint = chunk.system_fingerprint;
    if (isObject(chunk.usage)) {
      this.reportedUsage = { promptTokens: chunk.usage.prompt_tokens, completionTokens: chunk.usage.completion_tokens };
    }
    if ("usage" in chunk) {
      delete chunk.usage;
      this.#rewrites++;
    }
    if (choices.length === 0) return undefined;
    for (const choice of choices) if (isObject(choice)) this.#addChoice(choice);
    if (chunk.model !== this.#modelId) {
      chunk.model = this.#modelId;
      this.#rewrites++;
    }
    return chunk;
  }

  #addChoice(choice: Json): void {
    const index = typeof choice.index === "number" ? choice.index : 0;
    let state = this.#choices.get(index);
    if (!state) {
      state = {
        content: "",
        refusal: "",
        sawContent: false,
        toolCalls: new Map(),
        finishReason: null,
        logprobs: undefined,
        cut: false,
      };
      this.#choices.set(index, state);
    }
    if (typeof choice.finish_reason === "string") {
      state.finishReason = choice.finish_reason;
      this.finished = true;
    }
    if (isObject(choice.logprobs) && Array.isArray(choice.logprobs.content)) {
      (state.logprobs ??= []).push(...(choice.logprobs.content as unknown[]));
    }
    const delta = isObject(choice.delta) ? choice.delta : undefined;
    if (delta) this.#addDelta(state, delta);
    if (state.cut && state.finishReason !== null && state.finishReason !== "length") {
      // The upstream finished in the chunk whose text was cut: the caller's answer ends at the limit.
      choice.finish_reason = state.finishReason = "length";
      this.#rewrites++;
    }
  }

  /** Takes the text of `field` within the output budget, writing back what the caller may have. */
  #take(state: ChoiceState, holder: Json, field: string): string {
    const piece = holder[field];
    if (typeof piece !== "string" || piece === "") return "";
    const kept = this.#delivered.take(piece);
    if (kept !== piece) {
      holder[field] = kept;
      state.cut = true;
      this.#rewrites++;
    }
    return kept;
  }

  #addDelta(state: ChoiceState, delta: Json): void {
    if (typeof delta.content === "string") {
      state.content += this.#take(state, delta, "content");
      state.sawContent = true;
    }
    state.refusal += this.#take(state, delta, "refusal");
    this.#take(state, delta, "reasoning_content");
    this.#take(state, delta, "reasoning");
    if (!Array.isArray(delta.tool_calls)) return;
    for (const call of delta.tool_calls) {
      if (!isObject(call)) continue;
      const at = typeof call.index === "number" ? call.index : state.toolCalls.size;
      let tool = state.toolCalls.get(at);
      if (!tool) {
        tool = { id: "", type: "function", name: "", arguments: "" };
        state.toolCalls.set(at, tool);
      }
      if (typeof call.id === "string") tool.id = call.id;
      if (typeof call.type === "string") tool.type = call.type;
      const fn = isObject(call.function) ? call.function : {};
      // Deltas append, as in OpenAI's own stream accumulation.
      tool.name += this.#take(state, fn, "name");
      tool.arguments += this.#take(state, fn, "arguments");
    }
  }

  /**
   * Once the output limit is reached: finishes every open choice with `length` (as a model that
   * ran into max_tokens does) and returns one closing chunk per choice for a streaming caller.
   */
  closeAtLimit(): Json[] {
    const closing: Json[] = [];
    for (const [index, state] of [...this.#choices.entries()].sort(([a], [b]) => a - b)) {
      if (state.finishReason !== null) continue;
      state.finishReason = "length";
      closing.push({
        id: this.id,
        object: "chat.completion.chunk",
        created: this.created,
        model: this.#modelId,
        choices: [{ index, delta: {}, logprobs: null, finish_reason: "length" }],
      });
    }
    this.finished = true;
    return closing;
  }

  /** Output tokens in the text relayed so far (gpt-tokenizer BPE). */
  deliveredTokens(): bigint {
    return BigInt(countTextTokens(this.#delivered.text));
  }

  /** The final usage chunk a streaming caller asked for with stream_options.include_usage. */
  usageChunk(usage: BilledUsage): Json {
    return {
      id: this.id,
      object: "chat.completion.chunk",
      created: this.created,
      model: this.#modelId,
      choices: [],
      usage: usageJson(usage),
    };
  }

  /** The OpenAI chat.completion object equivalent to the chunks seen. */
  completion(usage: BilledUsage): Json {
    const choices = [...this.#choices.entries()]
      .sort(([a], [b]) => a - b)
      .map(([index, c]) => {
        const toolCalls = [...c.toolCalls.entries()]
          .sort(([a], [b]) => a - b)
          .map(([, t]) => ({ id: t.id, type: t.type, function: { name: t.name, arguments: t.arguments } }));
        const message: Json = {
          role: "assistant",
          content: c.sawContent || toolCalls.length === 0 ? c.content : null,
          refusal: c.refusal === "" ? null : c.refusal,
        };
        if (toolCalls.length > 0) message.tool_calls = toolCalls;
        return {
          index,
          message,
          logprobs: c.logprobs ? { content: c.logprobs } : null,
          finish_reason: c.finishReason ?? "stop",
        };
      });
    const completion: Json = {
      id: this.id,
      object: "chat.completion",
      created: this.created,
      model: this.#modelId,
      choices,
      usage: usageJson(usage),
    };
    if (this.#systemFingerprint !== undefined) completion.system_fingerprint = this.#systemFingerprint;
    return completion;
  }
}

function usageJson(usage: BilledUsage) {
  const prompt = Number(usage.inputTokens);
  const completion = Number(usage.outputTokens);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}
