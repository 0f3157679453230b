import { object, string } from "./response-schemas.ts";

/** Micro-USD per 1M tokens is 10^-12 USD per token: the digits after the point of a per-token price. */
const PER_TOKEN_DECIMALS = 12;

/**
 * A price in micro-USD per 1M tokens as exact decimal text in USD per token ("0.0000005" for
 * 0.50 USD per 1M), trailing zeros dropped: the unit and form of OpenRouter's `pricing` strings,
 * so a client that reads OpenRouter's model list reads ours unchanged. Text, not a number, as
 * there: a float would print such prices as `5e-7`.
 */
export function usdPerTokenText(micros: bigint): string {
  const digits = (micros < 0n ? -micros : micros).toString().padStart(PER_TOKEN_DECIMALS + 1, "0");
  const whole = digits.slice(0, -PER_TOKEN_DECIMALS);
  const fraction = digits.slice(-PER_TOKEN_DECIMALS).replace(/0+$/, "");
  return `${micros < 0n ? "-" : ""}${whole}${fraction ? `.${fraction}` : ""}`;
}

/** Prices in micro-USD per 1M tokens; `cachedInput` undefined means the input price. */
export interface TokenPrices {
  input: bigint;
  output: bigint;
  cachedInput: bigint | undefined;
}

/**
 * OpenRouter's `pricing` object of a model or an endpoint: `prompt` and `completion`, and
 * `input_cache_read`, what a prompt token the upstream served from its cache costs (the input
 * price where none is set, as settlement charges it).
 */
export const renderPricing = ({ input, output, cachedInput }: TokenPrices) => ({
  prompt: usdPerTokenText(input),
  completion: usdPerTokenText(output),
  input_cache_read: usdPerTokenText(cachedInput ?? input),
});

const perToken = (what: string) => string(`${what}: USD per token, as decimal text (OpenRouter's unit)`);

export const pricingSchema = (whose: string) =>
  object(
    {
      prompt: perToken("An input token"),
      completion: perToken("An output token"),
      input_cache_read: perToken(
        "An input token the upstream served from its prompt cache (`usage.prompt_tokens_details.cached_tokens`); " +
          "the prompt price where no cached price is set",
      ),
    },
    whose,
  );
