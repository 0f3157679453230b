import { AppError } from "@mkt/runtime/errors";

/** How a request orders the endpoints it may reach instead of the default weighted draw. */
export type EndpointSort = "price" | "latency" | "throughput";

/**
 * A request's `provider` object (OpenRouter's names, so its clients' habits carry over): which
 * hosters of an open model it may reach, in what order, and up to what price. Hosters are named by
 * name or id, case-insensitively.
 */
export interface ProviderPreferences {
  order?: string[];
  only?: string[];
  ignore?: string[];
  /** Default true: other endpoints are tried when the preferred ones fail or do not fit. */
  allowFallbacks: boolean;
  sort?: EndpointSort;
  /** USD per 1M tokens. */
  maxPrice?: { prompt?: number; completion?: number };
  /** Lower-case quantizations the endpoint must declare. */
  quantizations?: string[];
}

export const NO_PREFERENCES: ProviderPreferences = { allowFallbacks: true };

const SORTS: readonly EndpointSort[] = ["price", "latency", "throughput"];
const MAX_NAMES = 64;

/** The schema the OpenAPI document shows; the checks themselves are `providerPreferences`'. */
export const providerSchema = {
  type: ["object", "null"],
  description:
    "Routing preferences for an open model (a `canonical_id`), OpenRouter's names: `order`, `only` and `ignore` " +
    "name hosters (by name or id), `allow_fallbacks` (default true), `sort` (`price` | `latency` | `throughput`), " +
    "`max_price` ({prompt, completion} in USD per 1M tokens), `quantizations`. An unknown field is a 400.",
  example: { sort: "price", max_price: { prompt: 2, completion: 2 } },
} as const;

const invalid = (field: string, message: string) =>
  new AppError("invalid_request", message, { param: `provider.${field}` });

function names(value: unknown, field: string): string[] {
  if (!Array.isArray(value) || value.length > MAX_NAMES || value.some((v) => typeof v !== "string" || v === "")) {
    throw invalid(field, `Invalid \`provider.${field}\`: expected a list of at most ${MAX_NAMES} non-empty strings.`);
  }
  return value.map((v: string) => v.toLowerCase());
}

function price(value: unknown, field: string): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw invalid(
      `max_price.${field}`,
      `Invalid \`provider.max_price.${field}\`: expected a number of USD per 1M tokens, 0 or more.`,
    );
  }
  return value;
}

/**
 * Reads a request's `provider` object (absent or null: none). Every field is checked here, and a
 * field OpenRouter's clients might send that routing here does not read is refused by name rather
 * than silently ignored: a preference the gateway ignores would route where the client said not to.
 */
export function providerPreferences(value: unknown): ProviderPreferences {
  if (value === undefined || value === null) return NO_PREFERENCES;
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new AppError("invalid_request", "Invalid `provider`: expected an object.", { param: "provider" });
  }
  const prefs: ProviderPreferences = { allowFallbacks: true };
  for (const [field, v] of Object.entries(value as Record<string, unknown>)) {
    switch (field) {
      case "order":
      case "only":
      case "ignore":
      case "quantizations":
        if (v !== null) prefs[field] = names(v, field);
        break;
      case "allow_fallbacks":
        if (v !== null && typeof v !== "boolean")
          throw invalid(field, "Invalid `provider.allow_fallbacks`: expected a boolean.");
        prefs.allowFallbacks = v !== false;
        break;
      case "sort":
        if (v === null) break;
        if (typeof v !== "string" || !(SORTS as readonly string[]).includes(v)) {
          throw invalid(field, `Invalid \`provider.sort\`: expected one of ${SORTS.join(", ")}.`);
        }
        prefs.sort = v as EndpointSort;
        break;
      case "max_price": {
        if (v === null) break;
        if (typeof v !== "object" || Array.isArray(v))
          throw invalid(field, "Invalid `provider.max_price`: expected an object.");
        const limits = v as Record<string, unknown>;
        for (const key of Object.keys(limits)) {
          if (key !== "prompt" && key !== "completion") {
            throw invalid(
              `max_price.${key}`,
              `Unknown field \`provider.max_price.${key}\`: use prompt and completion.`,
            );
          }
        }
        prefs.maxPrice = { prompt: price(limits.prompt, "prompt"), completion: price(limits.completion, "completion") };
        break;
      }
      default:
        throw invalid(field, `Unknown field \`provider.${field}\`.`);
    }
  }
  return prefs;
}
