/**
 * What verification sends every open endpoint: fixed requests, so that runs compare over time and
 * across hosters, and small, so that probing costs a hoster little.
 */

/** The output cap of the counted call: an answer must stop there. */
export const PROBE_MAX_TOKENS = 16;

/**
 * The edge's runaway guard's defaults (OUTPUT_RUNAWAY_RATIO, OUTPUT_RUNAWAY_SLACK_TOKENS): a server
 * whose answer we count past max_tokens × ratio + slack ignores the cap, whatever its tokenizer.
 */
export const RUNAWAY_RATIO = 1.5;
export const RUNAWAY_SLACK_TOKENS = 32;

const PARAGRAPH =
  "The harbour town wakes before the sun. Fishing boats slip out past the breakwater while the bakery on the " +
  "square lights its ovens, and the first ferry of the day sounds its horn twice as it leaves the pier. By " +
  "seven the market stalls are up: crates of mackerel and cod on ice, baskets of early potatoes, jars of " +
  "cloudberry jam, knitted hats for the tourists who will not arrive for another month. ";

/**
 * A prompt of well over 1,000 tokens (a report below our count is honest, one above it by more
 * than max(5, 10%) is not: on a short prompt a chat template's overhead alone would pass that).
 */
export const PROBE_PROMPT = `${PARAGRAPH.repeat(16)}\nIn one short sentence: what happens in this town each morning?`;

/** The tool offered with `tool_choice: required`; its arguments must match this schema. */
export const PROBE_TOOL = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The current weather in a city.",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
      required: ["city"],
      additionalProperties: false,
    },
  },
} as const;

/**
 * The cache probe, sent twice: a long leading system message (a prefix long enough for any prefix
 * cache: OpenAI caches from 1,024 tokens) and a short user message. Two messages, because a server
 * computes the last message afresh whatever it has seen (the reference server's cache never counts
 * it), so a one-message prompt has no prefix to find.
 */
export const CACHE_PROBE_MESSAGES = [
  {
    role: "system",
    content: `You answer questions about the town described here.\n${PARAGRAPH.repeat(16)}`,
  },
  { role: "user", content: "In three words: what does the ferry do?" },
] as const;

/** The cache probe's output cap: its answers are not what is checked. */
export const CACHE_PROBE_MAX_TOKENS = 8;
