import { AppError } from "@mkt/runtime/errors";
import { LONGEST_TOKEN_BYTES } from "@mkt/runtime/token-bounds";
// Types only: the tokenizer is loaded on the first embeddings request, not at start.
import type * as Tokens from "@mkt/runtime/tokens";

/** The fields of an OpenAI embeddings body the gateway reads; the rest passes through. */
export interface EmbeddingsBody {
  model: string;
  /** A string or an array of strings (token arrays are refused: embeddingInputs). */
  input: unknown;
  encoding_format?: "float" | "base64" | null;
  dimensions?: number | null;
  user?: string | null;
  [field: string]: unknown;
}

/** The most inputs in one request, as OpenAI's API accepts. */
export const MAX_EMBEDDING_INPUTS = 2048;

/** JSON schema of the body: what is checked before any backend is asked. */
export const embeddingsBodySchema = {
  type: "object",
  required: ["model", "input"],
  properties: {
    model: { type: "string", minLength: 1, maxLength: 256, example: "demo-embed" },
    input: {
      type: ["string", "array"],
      description: `Text to embed: a string, or an array of 1 to ${MAX_EMBEDDING_INPUTS} strings. Token arrays are refused.`,
      maxItems: MAX_EMBEDDING_INPUTS,
      example: "The quick brown fox",
    },
    encoding_format: {
      type: ["string", "null"],
      enum: ["float", "base64", null],
      description: "`float` (default): arrays of numbers; `base64`: little-endian float32 values, base64-encoded",
    },
    dimensions: { type: ["integer", "null"], minimum: 1, maximum: 65_536 },
    user: { type: ["string", "null"], maxLength: 256 },
  },
};

function badInput(param: string, message: string): AppError {
  return new AppError("invalid_request", message, { param });
}

/**
 * The texts of `input`: a string is one input, an array of strings several. Token arrays (an
 * array of integers, or of integer arrays) are refused: the gateway counts and bills text with its
 * own tokenizer, and a model's upstream need not share the token ids a client used.
 */
export function embeddingInputs(input: unknown): string[] {
  const texts = typeof input === "string" ? [input] : input;
  if (!Array.isArray(texts) || texts.length === 0) {
    throw badInput("input", "input must be a non-empty string or a non-empty array of strings.");
  }
  texts.forEach((text: unknown, i) => {
    if (typeof text === "number" || Array.isArray(text)) {
      throw badInput("input", "Token arrays are not supported as input; send the text itself.");
    }
    if (typeof text !== "string") throw badInput(`input[${i}]`, "Each input must be a string.");
    if (text === "") throw badInput(`input[${i}]`, "An input must not be empty.");
  });
  return texts as string[];
}

let tokens: Promise<typeof Tokens> | undefined;

/**
 * The input tokens of `texts` by the gateway's tokenizer, each input within the model's context
 * (`limit`): one that cannot fit is refused 400 `context_length_exceeded` naming it, by its length
 * alone when even the longest tokens could not make it fit, so no time is spent counting it.
 * Counted on the main thread: the body limit bounds the work (see docs/embeddings.md).
 */
export async function countEmbeddingInputs(texts: readonly string[], limit: number): Promise<bigint> {
  const tooLong = (i: number) =>
    new AppError(
      "context_length_exceeded",
      `This model's maximum context length is ${limit} tokens, but input[${i}] uses more than ${limit} tokens.`,
      { param: texts.length === 1 ? "input" : `input[${i}]` },
    );
  texts.forEach((text, i) => {
    if (Math.ceil(Buffer.byteLength(text) / LONGEST_TOKEN_BYTES) > limit) throw tooLong(i);
  });
  const { countTextTokens } = await (tokens ??= import("@mkt/runtime/tokens"));
  let total = 0n;
  for (const [i, text] of texts.entries()) {
    const count = countTextTokens(text, limit + 1);
    if (count > limit) throw tooLong(i);
    total += BigInt(count);
  }
  return total;
}
