import { countTextTokens } from "@mkt/runtime/tokens";
import { microsToUsd, type Micros } from "@mkt/runtime/money";
import { reportedUsageOf, type BilledUsage, type ReportedUsage } from "./billed-usage.ts";
import { OutputBudget } from "./output-budget.ts";
import { PlainDeltas } from "./plain-delta.ts";
import { TopLevelStrings } from "./top-level-strings.ts";
import { UpstreamFailure } from "./stream-chat.ts";
import { REASONING_FIELDS } from "../translation/chat-json.ts";

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
  /** The legacy (pre-tools) `function_call`, when the upstream answers with one. */
  functionCall: { name: string; arguments: string } | undefined;
  /** The text of an audio answer an upstream sent although audio is refused at the edge. */
  audioTranscript: string | undefined;
  /** A reasoning model's own reasoning text (`reasoning_content` or `reasoning` deltas), as relayed. */
  reasoning: { field: string; text: string } | undefined;
  finishReason: string | null;
  logprobs: unknown[] | undefined;
  /** Its text as relayed, counted against the runaway guard's limit. */
  budget: OutputBudget;
  /** The runaway guard cut it: it ended with `length` and nothing more of it is relayed. */
  cut: boolean;
}

/** The chunk fields OpenAI defines: any other top-level field is the upstream's own. */
const CHUNK_FIELDS = new Set(["id", "object", "created", "model", "choices", "usage", "system_fingerprint", "error"]);

const isObject = (v: unknown): v is Json => !!v && typeof v === "object" && !Array.isArray(v);

/**
 * Reads upstream chat.completion.chunk payloads: rewrites each for the caller (our id, the route's
 * model name, no usage), remembers the upstream's usage report, collects the text delivered (for counting
 * output tokens) and assembles the equivalent chat.completion for non-streaming callers.
 *
 * The runaway guard (docs/adr/0022-runaway-guard-not-a-cap.md): each choice may relay `choiceLimit` tokens by our count, well
 * past the cap the upstream was sent, so an answer the upstream ends itself is never cut. A choice
 * that runs past it is cut there (OutputBudget) and ends with `finish_reason: "length"` in the
 * same chunk; later chunks of it are dropped. Once every choice seen has ended and one was cut,
 * `stoppedByGuard` tells the caller to stop reading: the upstream is ignoring `max_tokens`. (A
 * choice that has not started by then is not waited for: servers start every choice at once.)
 */
export class ChunkAccumulator {
  /** `chatcmpl-<request id>`: an upstream's own id is unique to that server only. */
  readonly id: string;
  readonly #modelId: string;
  /** Writes our id and the route's model name into an upstream chunk's text. */
  readonly #ours: TopLevelStrings;
  #created: number | undefined;
  #systemFingerprint: string | undefined;
  /** Top-level fields of the upstream's chunks beyond OpenAI's (a provider's own), for the completion. */
  #extras: Json | undefined;
  readonly #choices = new Map<number, ChoiceState>();
  readonly #choiceLimit: number;
  /** Choices the runaway guard cut. */
  #cutChoices = 0;
  reportedUsage: ReportedUsage | undefined;
  /**
   * Changes made to upstream chunks so far beyond their top-level `id` and `model` (relayText
   * edits those two in the upstream's text and serializes a chunk only for the others).
   */
  #rewrites = 0;
  /** True once any choice carried a finish_reason: the answer is complete, not truncated. */
  finished = false;
  /** The last chunk's own `id` and `model`, as JSON.parse read them (relayText edits them). */
  #upstreamIdentity: [unknown, unknown] = [undefined, undefined];
  /** When (epoch ms) the first chunk with a choice arrived: the answer's first token. */
  firstChoiceAt: number | undefined;
  /** Reads plain text deltas without JSON.parse; none when told not to (tests and the benchmark compare). */
  readonly #plainDeltas: PlainDeltas | undefined;

  constructor(id: string, modelId: string, choiceLimit: number, { scanPlainDeltas = true } = {}) {
    this.id = id;
    this.#modelId = modelId;
    this.#ours = new TopLevelStrings({ id, model: modelId });
    this.#choiceLimit = choiceLimit;
    this.#plainDeltas = scanPlainDeltas ? new PlainDeltas() : undefined;
  }

  /** Output tokens (our count) each choice may relay before the runaway guard cuts it. */
  get choiceLimit(): number {
    return this.#choiceLimit;
  }

  /** The runaway guard cut at least one choice. */
  get cutByGuard(): boolean {
    return this.#cutChoices > 0;
  }

  /** The guard cut a choice and every choice has ended: nothing more will be relayed. */
  get stoppedByGuard(): boolean {
    return this.#cutChoices > 0 && this.#complete;
  }

  /** Every choice seen has finished: only a usage report may still follow. */
  get #complete(): boolean {
    return this.#choices.size > 0 && [...this.#choices.values()].every((c) => c.finishReason !== null);
  }

  /** How the answer ended: the first choice's finish_reason (null while it runs). */
  get finishReason(): string | null {
    const first = Math.min(...this.#choices.keys());
    return this.#choices.get(first)?.finishReason ?? null;
  }

  get created(): number {
    return (this.#created ??= Math.floor(Date.now() / 1000));
  }

  /**
   * Takes one SSE data payload and returns the JSON text to relay, or undefined when it has no
   * choices. A chunk that needs no change but its `id` and `model` (no usage report, nothing cut)
   * is relayed as the upstream wrote it with those two values edited in its text: a stream is
   * relayed without serializing every chunk again, the bulk of a long stream's cost.
   */
  relayText(data: string): string | undefined {
    const rewrites = this.#rewrites;
    const chunk = this.accept(data);
    if (!chunk) return undefined;
    // A payload spread over several `data:` lines holds line breaks; one SSE line may not.
    if (this.#rewrites === rewrites && !data.includes("\n") && !data.includes("\r")) {
      const edited = this.#ours.apply(data, this.#upstreamIdentity);
      if (edited !== undefined) return edited;
    }
    return JSON.stringify(chunk);
  }

  /** Takes one SSE data payload; returns the chunk to relay, or undefined when it has no choices. */
  accept(data: string): Json | undefined {
    // Most chunks are a plain text delta, read without JSON.parse into the very object it returns.
    let chunk: unknown = this.#plainDeltas?.read(data);
    if (chunk === undefined) {
      try {
        chunk = JSON.parse(data);
      } catch {
        chunk = undefined;
      }
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
    if (typeof chunk.created === "number" && this.#created === undefined) this.#created = chunk.created;
    if (typeof chunk.system_fingerprint === "string") this.#systemFingerprint = chunk.system_fingerprint;
    for (const key in chunk) {
      if (!CHUNK_FIELDS.has(key)) (this.#extras ??= {})[key] = chunk[key];
    }
    if (isObject(chunk.usage)) {
      this.reportedUsage = reportedUsageOf(chunk.usage);
    }
    if ("usage" in chunk) {
      delete chunk.usage;
      this.#rewrites++;
    }
    if (choices.length === 0) return undefined;
    this.firstChoiceAt ??= Date.now();
    const kept = choices.filter((choice) => !isObject(choice) || this.#addChoice(choice));
    if (kept.length < choices.length) {
      chunk.choices = kept;
      this.#rewrites++;
      if (kept.length === 0) return undefined;
    }
    this.#upstreamIdentity[0] = chunk.id;
    this.#upstreamIdentity[1] = chunk.model;
    chunk.id = this.id;
    chunk.model = this.#modelId;
    return chunk;
  }

  /** Takes one choice of a chunk; false when it belongs to a choice the guard already ended. */
  #addChoice(choice: Json): boolean {
    const index = typeof choice.index === "number" ? choice.index : 0;
    let state = this.#choices.get(index);
    if (!state) {
      state = {
        content: "",
        refusal: "",
        sawContent: false,
        toolCalls: new Map(),
        functionCall: undefined,
        audioTranscript: undefined,
        reasoning: undefined,
        finishReason: null,
        logprobs: undefined,
        budget: new OutputBudget(this.#choiceLimit),
        cut: false,
      };
      this.#choices.set(index, state);
    }
    if (state.cut) return false;
    if (typeof choice.finish_reason === "string") {
      state.finishReason = choice.finish_reason;
      this.finished = true;
    }
    if (isObject(choice.logprobs) && Array.isArray(choice.logprobs.content)) {
      (state.logprobs ??= []).push(...(choice.logprobs.content as unknown[]));
    }
    // A server that writes a whole `message` into a chunk (not OpenAI's shape) is still relayed
    // as it came, so what it holds is counted like a delta.
    const delta = isObject(choice.delta) ? choice.delta : isObject(choice.message) ? choice.message : undefined;
    if (delta) this.#addDelta(state, delta);
    if (state.cut) {
      // Cut in this chunk: the caller's answer ends here, as a model that ran into max_tokens does.
      if (choice.finish_reason !== "length") {
        choice.finish_reason = "length";
        this.#rewrites++;
      }
      state.finishReason = "length";
      this.finished = true;
    }
    return true;
  }

  /** Takes the text of `field` within the choice's budget, writing back what the caller may have. */
  #take(state: ChoiceState, holder: Json, field: string): string {
    const piece = holder[field];
    if (typeof piece !== "string" || piece === "") return "";
    const kept = state.budget.take(piece);
    if (kept !== piece) {
      holder[field] = kept;
      this.#rewrites++;
      if (!state.cut) this.#cutChoices++;
      state.cut = true;
    }
    return kept;
  }

  #addDelta(state: ChoiceState, delta: Json): void {
    if (typeof delta.content === "string") {
      state.content += this.#take(state, delta, "content");
      state.sawContent = true;
    }
    state.refusal += this.#take(state, delta, "refusal");
    for (const field of REASONING_FIELDS) {
      const text = this.#take(state, delta, field);
      if (text !== "") (state.reasoning ??= { field, text: "" }).text += text;
    }
    // Legacy function calling and audio transcripts are output the caller receives: billed like
    // text (the transcript is the only text of an audio answer; the audio itself has no price).
    if (isObject(delta.function_call)) {
      const fn = (state.functionCall ??= { name: "", arguments: "" });
      fn.name += this.#take(state, delta.function_call, "name");
      fn.arguments += this.#take(state, delta.function_call, "arguments");
    }
    if (isObject(delta.audio)) {
      state.audioTranscript = (state.audioTranscript ?? "") + this.#take(state, delta.audio, "transcript");
    }
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

  /** Output tokens in the text relayed so far: each choice counted on its own (gpt-tokenizer BPE). */
  deliveredTokens(): bigint {
    let tokens = 0;
    for (const state of this.#choices.values()) tokens += countTextTokens(state.budget.text);
    return BigInt(tokens);
  }

  /**
   * The final usage chunk a streaming caller asked for with stream_options.include_usage; `cost`
   * (micro-USD) is what settlement will post for it.
   */
  usageChunk(usage: BilledUsage, cost: Micros): Json {
    return {
      id: this.id,
      object: "chat.completion.chunk",
      created: this.created,
      model: this.#modelId,
      choices: [],
      usage: usageJson(usage, cost),
    };
  }

  /** The OpenAI chat.completion object equivalent to the chunks seen, with its usage and cost. */
  completion(usage: BilledUsage, cost: Micros): Json {
    const choices = [...this.#choices.entries()]
      .sort(([a], [b]) => a - b)
      .map(([index, c]) => {
        const toolCalls = [...c.toolCalls.entries()]
          .sort(([a], [b]) => a - b)
          .map(([, t]) => ({ id: t.id, type: t.type, function: { name: t.name, arguments: t.arguments } }));
        const message: Json = {
          role: "assistant",
          content: c.sawContent || (toolCalls.length === 0 && !c.functionCall) ? c.content : null,
          refusal: c.refusal === "" ? null : c.refusal,
        };
        if (toolCalls.length > 0) message.tool_calls = toolCalls;
        if (c.functionCall) message.function_call = { ...c.functionCall };
        if (c.audioTranscript !== undefined) message.audio = { transcript: c.audioTranscript };
        if (c.reasoning) message[c.reasoning.field] = c.reasoning.text;
        return {
          index,
          message,
          logprobs: c.logprobs ? { content: c.logprobs } : null,
          finish_reason: c.finishReason ?? "stop",
        };
      });
    // A provider's own top-level fields reach a non-streamed caller as they reach a streamed one;
    // ours (id, model, usage…) are written over them.
    const completion: Json = {
      ...this.#extras,
      id: this.id,
      object: "chat.completion",
      created: this.created,
      model: this.#modelId,
      choices,
      usage: usageJson(usage, cost),
    };
    if (this.#systemFingerprint !== undefined) completion.system_fingerprint = this.#systemFingerprint;
    return completion;
  }
}

/**
 * OpenAI's usage object, with `cost` in USD (OpenRouter's field; docs/adr/0017-one-cost-function.md)
 * and the billed cached and reasoning tokens in OpenAI's details objects.
 */
function usageJson(usage: BilledUsage, cost: Micros) {
  const prompt = Number(usage.inputTokens);
  const completion = Number(usage.outputTokens);
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: Number(usage.cachedInputTokens) },
    completion_tokens_details: { reasoning_tokens: Number(usage.reasoningTokens) },
    cost: microsToUsd(cost),
  };
}
