import { usdToMicros } from "@mkt/runtime/money";

/** One platform-served model, as configured in LOCAL_MODELS or CLOUD_MODELS (one format for both). */
export interface ConfiguredModel {
  modelId: string;
  modelAlias: string;
  contextWindow: bigint;
  inputPricePer1mMicros: bigint;
  outputPricePer1mMicros: bigint;
  /**
   * The price of input tokens the upstream served from its prompt cache; undefined means the input
   * price (so an explicit 0 stays a price of 0).
   */
  cachedInputPricePer1mMicros?: bigint;
  /** The model name the upstream server knows it by (defaults to modelId). */
  upstreamModel: string;
  /** Which API the model answers: chat completions (the default) or embeddings. */
  kind: ModelKind;
  /** The most choices (`n`) one chat request may ask for (default 1). */
  maxN: bigint;
}

export type ModelKind = "chat" | "embedding";

/** Above this, an `n` is refused by the edge's body schema anyway. */
const MAX_N_LIMIT = 128;

function kindOf(entry: Record<string, unknown>, where: string): ModelKind {
  const value = entry.kind ?? "chat";
  if (value !== "chat" && value !== "embedding") throw new Error(`${where}: kind must be "chat" or "embedding"`);
  return value;
}

function maxNOf(entry: Record<string, unknown>, where: string): bigint {
  const value = entry.max_n ?? 1;
  if (!Number.isSafeInteger(value) || (value as number) < 1 || (value as number) > MAX_N_LIMIT) {
    throw new Error(`${where}: max_n must be an integer from 1 to ${MAX_N_LIMIT}`);
  }
  return BigInt(value as number);
}

function price(entry: Record<string, unknown>, field: string, where: string): bigint {
  const value = entry[field];
  if (typeof value !== "string" && typeof value !== "number") {
    throw new Error(`${where}: ${field} must be a USD amount (string or number)`);
  }
  if (typeof value === "number" && !Number.isFinite(value)) throw new Error(`${where}: ${field} must be finite`);
  let micros: bigint;
  try {
    micros = usdToMicros(value);
  } catch {
    throw new Error(`${where}: ${field} must be a USD amount such as "0.50"`);
  }
  if (micros < 0n) throw new Error(`${where}: ${field} must not be negative`);
  return micros;
}

/**
 * `cached_input_price_per_1m_usd`: optional, and never above the input price (a cache hit that
 * costs more than computing the prompt afresh would be a price no customer could expect).
 */
function cachedPrice(entry: Record<string, unknown>, inputPrice: bigint, where: string): bigint | undefined {
  const field = "cached_input_price_per_1m_usd";
  if (entry[field] === undefined || entry[field] === null) return undefined;
  const micros = price(entry, field, where);
  if (micros > inputPrice) throw new Error(`${where}: ${field} must not be above input_price_per_1m_usd`);
  return micros;
}

function optionalString(entry: Record<string, unknown>, field: string, where: string): string | undefined {
  const value = entry[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string" || value.trim() === "")
    throw new Error(`${where}: ${field} must be a non-empty string`);
  return value.trim();
}

/**
 * Parses a LOCAL_MODELS or CLOUD_MODELS JSON array. Throws an Error describing the first bad
 * entry; the config loader prefixes it with the variable's name.
 */
export function parseConfiguredModels(text: string): ConfiguredModel[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new Error("must be a JSON array");
  }
  if (!Array.isArray(parsed)) throw new Error("must be a JSON array");
  if (parsed.length === 0) throw new Error("must list at least one model");
  const models: ConfiguredModel[] = [];
  const seen = new Set<string>();
  parsed.forEach((raw: unknown, i) => {
    const where = `entry ${i}`;
    if (!raw || typeof raw !== "object" || Array.isArray(raw)) throw new Error(`${where}: must be an object`);
    const entry = raw as Record<string, unknown>;
    const modelId = optionalString(entry, "model_id", where);
    if (!modelId) throw new Error(`${where}: model_id is required`);
    if (modelId.toLowerCase() === "auto") throw new Error(`${where}: "auto" is reserved`);
    const contextWindow = entry.context_window;
    if (!Number.isSafeInteger(contextWindow) || (contextWindow as number) <= 0) {
      throw new Error(`${where}: context_window must be a positive integer`);
    }
    const inputPricePer1mMicros = price(entry, "input_price_per_1m_usd", where);
    const cachedInputPricePer1mMicros = cachedPrice(entry, inputPricePer1mMicros, where);
    const model: ConfiguredModel = {
      modelId,
      modelAlias: optionalString(entry, "model_alias", where) ?? "",
      contextWindow: BigInt(contextWindow as number),
      inputPricePer1mMicros,
      outputPricePer1mMicros: price(entry, "output_price_per_1m_usd", where),
      ...(cachedInputPricePer1mMicros !== undefined && { cachedInputPricePer1mMicros }),
      upstreamModel: optionalString(entry, "upstream_model", where) ?? modelId,
      kind: kindOf(entry, where),
      maxN: maxNOf(entry, where),
    };
    // Ids and aliases share one namespace when resolving, so any clash would make routing ambiguous.
    for (const name of [model.modelId, model.modelAlias].filter(Boolean)) {
      const key = name.toLowerCase();
      if (seen.has(key)) throw new Error(`${where}: "${name}" is already used as a model id or alias`);
      seen.add(key);
    }
    models.push(model);
  });
  return models;
}

/**
 * The first id or alias of `models` that `taken` already uses (case-insensitively), if any: local
 * and cloud models resolve in one namespace, so a name may belong to one model only.
 */
export function sharedName(taken: readonly ConfiguredModel[], models: readonly ConfiguredModel[]): string | undefined {
  const used = new Set(
    taken
      .flatMap((m) => [m.modelId, m.modelAlias])
      .filter(Boolean)
      .map((n) => n.toLowerCase()),
  );
  for (const m of models) {
    for (const name of [m.modelId, m.modelAlias]) if (name && used.has(name.toLowerCase())) return name;
  }
  return undefined;
}
