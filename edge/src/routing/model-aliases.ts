/**
 * Model names a client cannot change, mapped by the operator onto models the gateway serves
 * (MODEL_ALIASES). Coding agents send their vendor's model names by default (Claude Code its
 * Claude models, Codex CLI its GPT-5 models): with these, pointing one at the gateway needs no
 * model setting. A name ending in `*` covers every name it begins (versions to come). A model the
 * gateway serves under a name always wins over an alias of that name, and an alias names a model,
 * never another alias.
 */
export interface ModelAlias {
  /** The name a client sends: exact (case-insensitive), or a prefix ending in `*`. */
  name: string;
  /** The model id (or alias, or `auto`) it resolves to, as a client could name it. */
  target: string;
}

/** The model `npm start` serves for agents: a context as large as theirs expect (200,000 tokens). */
export const AGENT_DEMO_MODEL = "demo-agent";

/**
 * What Claude Code and Codex CLI send when their user sets no model: Claude Code's default
 * (`claude-opus-4-8[1m]` in 2.1, the `[1m]` asking for its long context) and its small fast model
 * for side tasks (a Haiku), Codex CLI's GPT-5 and GPT-5 Codex models, and its default in 0.171
 * (`gpt-6.2-sol`) when its user sets no model; the patterns take the versions that follow.
 */
export const DEFAULT_MODEL_ALIASES = [
  "claude-opus-4-8[1m]",
  "claude-opus-4-8",
  "claude-sonnet-4-5",
  "claude-haiku-4-5",
  "claude-haiku-4-5-20251001",
  "claude-*",
  "gpt-5-codex",
  "gpt-5.1-codex-max",
  "gpt-5.5",
  "gpt-5*",
  "gpt-6.2-sol",
  "gpt-6*",
]
  .map((name) => `${name}=${AGENT_DEMO_MODEL}`)
  .join(",");

/** Names are model names: no spaces, commas, `=` or control characters; `[` `]` are allowed (`[1m]`). */
// eslint-disable-next-line no-control-regex
const NAME = /^[^\s,=*\x00-\x1f\x7f]{1,256}$/;

/** Parses `name=target,name=target` (MODEL_ALIASES); throws an Error naming the first bad entry. */
export function parseModelAliases(text: string): ModelAlias[] {
  const aliases: ModelAlias[] = [];
  const seen = new Set<string>();
  for (const [i, raw] of text.split(",").entries()) {
    const entry = raw.trim();
    if (entry === "") continue;
    const where = `entry ${i + 1} (${JSON.stringify(entry.slice(0, 80))})`;
    const [name, target, ...rest] = entry.split("=").map((part) => part.trim());
    if (!name || !target || rest.length > 0) throw new Error(`${where}: must be name=model`);
    const prefix = name.endsWith("*") ? name.slice(0, -1) : name;
    if (!NAME.test(prefix)) throw new Error(`${where}: the name must be a model name, optionally ending in *`);
    if (!NAME.test(target)) throw new Error(`${where}: the model must be a model name (no *)`);
    if (name.toLowerCase() === "auto") throw new Error(`${where}: "auto" is reserved`);
    const key = name.toLowerCase();
    if (seen.has(key)) throw new Error(`${where}: "${name}" is listed twice`);
    seen.add(key);
    aliases.push({ name, target });
  }
  return aliases;
}

/** The alias table, indexed: exact names first, then the longest matching prefix. */
export class ModelAliases {
  readonly entries: readonly ModelAlias[];
  readonly #exact = new Map<string, string>();
  readonly #prefixes: Array<{ prefix: string; target: string }>;

  constructor(entries: readonly ModelAlias[] = []) {
    this.entries = entries;
    const prefixes: Array<{ prefix: string; target: string }> = [];
    for (const { name, target } of entries) {
      if (name.endsWith("*")) prefixes.push({ prefix: name.slice(0, -1).toLowerCase(), target });
      else this.#exact.set(name.toLowerCase(), target);
    }
    this.#prefixes = prefixes.sort((a, b) => b.prefix.length - a.prefix.length);
  }

  /** The model a name is an alias of, if it is one. */
  targetOf(name: string): string | undefined {
    const folded = name.toLowerCase();
    return this.#exact.get(folded) ?? this.#prefixes.find((p) => folded.startsWith(p.prefix))?.target;
  }
}
