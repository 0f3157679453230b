import type { FromSchema } from "json-schema-to-ts";

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

const SORTS = ["price", "latency", "throughput"] as const satisfies readonly EndpointSort[];
const MAX_NAMES = 64;

const names = (what: string) =>
  ({
    type: ["array", "null"],
    description: what,
    maxItems: MAX_NAMES,
    items: { type: "string", minLength: 1 },
  }) as const;
const usdPerMillion = { type: ["number", "null"], minimum: 0, description: "USD per 1M tokens" } as const;

/**
 * The `provider` field of every body that routes (chat, Responses, Messages), checked by the
 * route's schema like any other field: a wrong one is a 400 naming it (`provider.sort`). A field
 * OpenRouter's clients might send that routing here does not read (`data_collection`) is refused
 * by name rather than ignored, since a preference the gateway ignored would route where the client
 * said not to: hence `additionalProperties: false`, here alone in bodies that otherwise pass
 * unknown fields on. Null, for the whole or a field, means "no preference", as OpenRouter reads it.
 */
export const providerSchema = {
  type: ["object", "null"],
  description:
    "Routing preferences for an open model (a `canonical_id`), OpenRouter's names. An unknown field is a 400.",
  additionalProperties: false,
  properties: {
    order: names("Hosters (by name or id) tried first, in this order."),
    only: names("The only hosters (by name or id) the request may reach."),
    ignore: names("Hosters (by name or id) the request never reaches."),
    allow_fallbacks: {
      type: ["boolean", "null"],
      description: "Default true: other endpoints are tried when the preferred ones fail or do not fit.",
    },
    sort: {
      type: ["string", "null"],
      enum: [...SORTS, null],
      description: "Order endpoints by this instead of the weighted draw.",
    },
    max_price: {
      type: ["object", "null"],
      description: "The highest price an endpoint may charge.",
      additionalProperties: false,
      properties: { prompt: usdPerMillion, completion: usdPerMillion },
    },
    quantizations: names("Quantizations the endpoint must declare (any case)."),
  },
  example: { sort: "price", max_price: { prompt: 2, completion: 2 } },
} as const;

/** A `provider` value as the route's schema has let it through. */
export type ProviderField = FromSchema<typeof providerSchema>;

const lowerCase = (list: readonly string[] | null | undefined) => list?.map((name) => name.toLowerCase());

/**
 * The routing preferences of a checked `provider` (absent or null: none). Names are compared
 * case-insensitively, so they are lowered once here.
 */
export function providerPreferences(value: ProviderField | undefined): ProviderPreferences {
  if (value === undefined || value === null) return NO_PREFERENCES;
  const prefs: ProviderPreferences = { allowFallbacks: value.allow_fallbacks !== false };
  for (const field of ["order", "only", "ignore", "quantizations"] as const) {
    const list = lowerCase(value[field]);
    if (list) prefs[field] = list;
  }
  if (value.sort) prefs.sort = value.sort;
  if (value.max_price) {
    prefs.maxPrice = {
      prompt: value.max_price.prompt ?? undefined,
      completion: value.max_price.completion ?? undefined,
    };
  }
  return prefs;
}
