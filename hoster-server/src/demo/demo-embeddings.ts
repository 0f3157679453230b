import { createHash } from "node:crypto";
import { AppError } from "@mkt/runtime/errors";
import { countTextTokens } from "@mkt/runtime/tokens";

/** A vector's length when the request gives no `dimensions`: small, so answers stay small. */
export const DEMO_EMBEDDING_DIMENSIONS = 64;
/** The most `dimensions` the demo answers, as OpenAI's largest model does. */
const MAX_DIMENSIONS = 3072;
/** The most inputs in one request, as OpenAI's API accepts. */
const MAX_INPUTS = 2048;

export interface EmbeddingRequest {
  model: string;
  input: string[];
  encodingFormat: "float" | "base64";
  dimensions: number;
}

function bad(param: string, message: string): AppError {
  return new AppError("invalid_request", message, { param });
}

/** Validates an embeddings request body; throws a 400 AppError naming the first bad field. */
export function parseEmbeddingRequest(body: unknown): EmbeddingRequest {
  if (!body || typeof body !== "object" || Array.isArray(body)) {
    throw bad("body", "The request body must be a JSON object.");
  }
  const { model, input, encoding_format: format, dimensions } = body as Record<string, unknown>;
  if (typeof model !== "string" || model.trim() === "") throw bad("model", "model must be a non-empty string.");
  const inputs = typeof input === "string" ? [input] : input;
  if (!Array.isArray(inputs) || inputs.length === 0 || inputs.length > MAX_INPUTS) {
    throw bad("input", `input must be a string or an array of 1 to ${MAX_INPUTS} strings.`);
  }
  inputs.forEach((text: unknown, i) => {
    if (typeof text !== "string") {
      throw bad(`input[${i}]`, "The demo model embeds text only: input must be a string or an array of strings.");
    }
  });
  if (format !== undefined && format !== null && format !== "float" && format !== "base64") {
    throw bad("encoding_format", "encoding_format must be float or base64.");
  }
  if (
    dimensions !== undefined &&
    dimensions !== null &&
    (!Number.isSafeInteger(dimensions) || (dimensions as number) < 1 || (dimensions as number) > MAX_DIMENSIONS)
  ) {
    throw bad("dimensions", `dimensions must be an integer from 1 to ${MAX_DIMENSIONS}.`);
  }
  return {
    model,
    input: inputs as string[],
    encodingFormat: format === "base64" ? "base64" : "float",
    dimensions: (dimensions as number | undefined | null) ?? DEMO_EMBEDDING_DIMENSIONS,
  };
}

/**
 * The demo model's embedding of `text` (documented in hoster-server/README.md): the bytes of
 * SHA-256(`<k>:<text>`) for k = 0, 1, 2, … in a row, read two at a time as big-endian 16-bit
 * integers u, each component (u − 32767.5) / 32767.5, then the vector divided by its length and
 * rounded to float32 (the precision of OpenAI's base64 encoding), so float and base64 answers
 * decode to the same numbers. Equal texts get equal vectors; the length is 1 within float32's
 * rounding. It means nothing: a demo, and a fixture tests can recompute.
 */
export function demoEmbedding(text: string, dimensions = DEMO_EMBEDDING_DIMENSIONS): Float32Array {
  const raw = new Float64Array(dimensions);
  let bytes = Buffer.alloc(0);
  for (let k = 0; bytes.length < dimensions * 2; k++) {
    bytes = Buffer.concat([bytes, createHash("sha256").update(`${k}:${text}`).digest()]);
  }
  for (let i = 0; i < dimensions; i++) raw[i] = (bytes.readUInt16BE(i * 2) - 32767.5) / 32767.5;
  const length = Math.hypot(...raw);
  return Float32Array.from(raw, (v) => v / length);
}

/** OpenAI's `base64` encoding of an embedding: its float32 values, little-endian. */
export function embeddingBase64(vector: Float32Array): string {
  const bytes = Buffer.alloc(vector.length * 4);
  vector.forEach((v, i) => bytes.writeFloatLE(v, i * 4));
  return bytes.toString("base64");
}

/** The `create embeddings` answer in OpenAI's shape, usage counted as the gateway counts input. */
export function demoEmbeddings(request: EmbeddingRequest) {
  const promptTokens = request.input.reduce((sum, text) => sum + countTextTokens(text), 0);
  return {
    object: "list",
    model: request.model,
    data: request.input.map((text, index) => {
      const vector = demoEmbedding(text, request.dimensions);
      return {
        object: "embedding",
        index,
        embedding: request.encodingFormat === "base64" ? embeddingBase64(vector) : Array.from(vector),
      };
    }),
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
  };
}
