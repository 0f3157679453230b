import { createHash } from "node:crypto";
import type { ChatMessageLike } from "@mkt/runtime/tokens";

/**
 * Leading runs a model keeps, per model. One entry is one run (a conversation of m messages
 * leaves m), so this holds a few hundred agent conversations of a few dozen turns, in about a
 * megabyte per model: enough for a demo hoster behind a gateway that keeps a conversation on
 * one endpoint, and bounded whatever clients send.
 */
export const PREFIX_CACHE_ENTRIES = 10_000;

/** A message as the prefix cache tells it apart: everything of it that reaches the model. */
interface CachedMessage extends ChatMessageLike {
  tool_call_id?: unknown;
}

/**
 * The hash of every leading run of `messages`, shortest first: each is chained from the one
 * before, so a run is one fixed-size key whatever its length, and the contents are not kept.
 * The chain starts from the tool definitions, which a model reads before the conversation: a
 * run seen with other tools is another prefix.
 */
export function leadingRunHashes(messages: readonly CachedMessage[], tools: unknown): string[] {
  let previous = createHash("sha256")
    .update(JSON.stringify(tools ?? null))
    .digest();
  return messages.map((m) => {
    const fields = [m.role, m.content ?? null, m.name ?? null, m.tool_calls ?? null, m.tool_call_id ?? null];
    previous = createHash("sha256").update(previous).update(JSON.stringify(fields)).digest();
    return previous.toString("base64url");
  });
}

/** The leading message runs one model has seen, least recently used evicted first. */
class RunLru {
  // A Map iterates in insertion order: deleting and setting a key makes it the newest.
  readonly #runs = new Map<string, true>();
  readonly #capacity: number;

  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  has(hash: string): boolean {
    return this.#runs.has(hash);
  }

  touch(hash: string): void {
    this.#runs.delete(hash);
    this.#runs.set(hash, true);
    if (this.#runs.size > this.#capacity) this.#runs.delete(this.#runs.keys().next().value!);
  }
}

/**
 * What the demo model "has computed before": per model, a bounded LRU of the leading message runs
 * of earlier requests, as a server with prefix caching (vLLM, SGLang) keeps the prompt blocks it
 * has seen.
 */
export class PrefixCache {
  readonly #models = new Map<string, RunLru>();
  readonly #entriesPerModel: number;

  constructor(entriesPerModel = PREFIX_CACHE_ENTRIES) {
    this.#entriesPerModel = entriesPerModel;
  }

  /**
   * How many leading messages of this request the model has seen before (at most all but the
   * last: the newest message is always fresh), then records every leading run of the request,
   * so the next turn of the conversation, which resends it all, finds it.
   */
  lookUpAndRecord(model: string, messages: readonly CachedMessage[], tools: unknown): number {
    let runs = this.#models.get(model);
    if (!runs) {
      runs = new RunLru(this.#entriesPerModel);
      this.#models.set(model, runs);
    }
    const hashes = leadingRunHashes(messages, tools);
    let seen = hashes.length - 1;
    while (seen > 0 && !runs.has(hashes[seen - 1]!)) seen--;
    // Longest run first, so the shortest runs, which more conversations share (a system prompt),
    // are the most recently used and the last evicted, as a block cache frees a sequence's tail
    // before its head.
    for (let i = hashes.length - 1; i >= 0; i--) runs.touch(hashes[i]!);
    return seen;
  }
}
