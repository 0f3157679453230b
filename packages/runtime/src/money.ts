/**
 * Money is integer micro-USD (`bigint`) end to end (docs/adr/0002-money-as-integer-micro-usd.md); a
 * USD number appears only when rendering JSON.
 */
export type Micros = bigint;

export const MICROS_PER_USD = 1_000_000n;
const TOKENS_PER_PRICE_UNIT = 1_000_000n;

/** Parses a decimal USD amount ("0.15", 5, "12") exactly into micro-USD; at most 6 decimals. */
export function usdToMicros(usd: string | number): Micros {
  const text = typeof usd === "number" ? usd.toFixed(6) : usd.trim();
  const match = /^(-)?(\d+)(?:\.(\d{1,6})\d*)?$/.exec(text);
  if (!match) throw new RangeError(`not a USD amount: ${JSON.stringify(usd)}`);
  const [, sign, whole, fraction = ""] = match;
  const micros = BigInt(whole!) * MICROS_PER_USD + BigInt(fraction.padEnd(6, "0"));
  return sign ? -micros : micros;
}

/** Renders micro-USD as a USD number for JSON (exact for any realistic amount). */
export function microsToUsd(micros: Micros): number {
  return Number(micros) / 1_000_000;
}

/** A request's cost: ceil((in * inPrice + out * outPrice) / 1M), prices in micro-USD per 1M tokens. */
export function costMicros(
  inputTokens: bigint,
  outputTokens: bigint,
  inputPricePer1m: Micros,
  outputPricePer1m: Micros,
): Micros {
  const scaled = inputTokens * inputPricePer1m + outputTokens * outputPricePer1m;
  return (scaled + TOKENS_PER_PRICE_UNIT - 1n) / TOKENS_PER_PRICE_UNIT;
}

/** Most output tokens that `budget` pays for after the input (0 when the input alone exceeds it). */
export function affordableOutputTokens(
  budget: Micros,
  inputTokens: bigint,
  inputPricePer1m: Micros,
  outputPricePer1m: Micros,
): bigint {
  if (outputPricePer1m === 0n) return BigInt(Number.MAX_SAFE_INTEGER);
  const room = budget * TOKENS_PER_PRICE_UNIT - inputTokens * inputPricePer1m;
  return room <= 0n ? 0n : room / outputPricePer1m;
}

export const PLATFORM_SHARE_PERCENT = 20n;

/**
 * Splits a hoster-served cost: the platform keeps floor(20%), the hoster the rest, so the two
 * always add up to the cost exactly. Platform-served (local, cloud) costs are all platform fee.
 */
export function splitRevenue(cost: Micros, servedByHoster: boolean): { platformFee: Micros; hosterEarned: Micros } {
  if (!servedByHoster) return { platformFee: cost, hosterEarned: 0n };
  const platformFee = (cost * PLATFORM_SHARE_PERCENT) / 100n;
  return { platformFee, hosterEarned: cost - platformFee };
}

/**
 * Renders micro-USD as exact decimal text with six places ("1.500000", "-0.000001"), for files
 * such as the usage CSV where a float's shortest form ("1.5e-7") would be awkward to read back.
 */
export function microsToUsdText(micros: Micros): string {
  const negative = micros < 0n;
  const abs = negative ? -micros : micros;
  const fraction = (abs % MICROS_PER_USD).toString().padStart(6, "0");
  return `${negative ? "-" : ""}${abs / MICROS_PER_USD}.${fraction}`;
}
