import { AppError } from "@mkt/runtime/errors";
import type { RegisterHosterRequest } from "@mkt/proto/registry/v1/registry";
import { parseEndpointUrl } from "@mkt/runtime/endpoint-guard";
import type { StoredModel } from "./hoster-store.ts";

export const MAX_NAME_CHARS = 100;
export const MAX_MODELS = 50;
export const MAX_ALIAS_CHARS = 100;
export const MAX_CONTEXT_WINDOW = 10_000_000n;
const MODEL_ID_RE = /^[A-Za-z0-9._:/-]{1,128}$/;
// A public model name: OpenRouter's `author/slug` form (one "/" at most, neither part empty), so
// that GET /v1/models/{canonical_id}/endpoints takes it as two path segments.
const CANONICAL_ID_RE = /^[A-Za-z0-9._:-]+(\/[A-Za-z0-9._:-]+)?$/;
const MAX_CANONICAL_ID_CHARS = 128;
const QUANTIZATION_RE = /^[a-z0-9_]{1,32}$/;
// Printable ASCII without spaces: the token goes into an HTTP header as it is.
const API_KEY_RE = /^[\x21-\x7e]{8,512}$/;
const MAX_EMAIL_CHARS = 254;

/** A registration request whose fields passed validation. */
export interface ValidRegistration {
  name: string;
  email: string;
  endpoint: URL;
  apiKey: string;
  inviteCode: string;
  password: string;
  clientIp: string;
  models: StoredModel[];
}

/** As OpenAI bounds `n`. */
const MAX_N = 128n;

const invalid = (param: string, message: string) => new AppError("invalid_request", message, { param });

/** Whether `value` could be a registered model_id (what registration accepts). */
export const isModelId = (value: string) => MODEL_ID_RE.test(value);

/** A model's public name (`author/slug` or a plain id), or invalid_request naming `param`. */
export function validCanonicalId(value: string, param: string): string {
  const id = value.trim();
  if (id.length > MAX_CANONICAL_ID_CHARS || !CANONICAL_ID_RE.test(id)) {
    throw invalid(
      param,
      `canonical_id must be 1 to ${MAX_CANONICAL_ID_CHARS} characters: letters, digits and . _ : - with at most one / (author/slug).`,
    );
  }
  return id;
}

/** A model's quantization, lower-cased, or invalid_request naming `param`. */
export function validQuantization(value: string, param: string): string {
  const quantization = value.trim().toLowerCase();
  if (!QUANTIZATION_RE.test(quantization)) {
    throw invalid(
      param,
      "quantization must be 1 to 32 characters: letters, digits and _ (bf16, fp8, int4, q4_k_m, ...).",
    );
  }
  return quantization;
}

/**
 * Validates every field before anything else happens, so a malformed request costs no call to
 * accounts or the hoster's server. The e-mail gets only a shape check here; accounts, which owns
 * logins, applies the full rule (and the password rules) when it creates the login.
 */
export function validateRegistration(req: RegisterHosterRequest): ValidRegistration {
  const name = req.name.trim();
  if (name.length < 1 || name.length > MAX_NAME_CHARS) {
    throw invalid("name", `name must be 1 to ${MAX_NAME_CHARS} characters.`);
  }
  const email = req.email.trim();
  if (email.length > MAX_EMAIL_CHARS || !/^[^\s@]+@[^\s@]+$/.test(email)) {
    throw invalid("email", "email must be a valid e-mail address.");
  }
  const endpoint = parseEndpointUrl(req.endpointUrl);
  if (!API_KEY_RE.test(req.apiKey)) {
    throw invalid("api_key", "api_key must be 8 to 512 printable characters without spaces.");
  }
  if (req.inviteCode.trim() === "") throw invalid("invite_code", "invite_code is required.");
  if (req.models.length < 1 || req.models.length > MAX_MODELS) {
    throw invalid("models", `models must list 1 to ${MAX_MODELS} models.`);
  }
  const seen = new Set<string>();
  const models = req.models.map((model, i) => {
    const modelId = model.modelId.trim();
    if (!MODEL_ID_RE.test(modelId)) {
      throw invalid(`models[${i}].model_id`, "model_id must be 1 to 128 characters: letters, digits and . _ : / -");
    }
    if (seen.has(modelId)) throw invalid(`models[${i}].model_id`, `model_id "${modelId}" is listed twice.`);
    seen.add(modelId);
    const modelAlias = model.modelAlias.trim();
    if (modelAlias.length > MAX_ALIAS_CHARS) {
      throw invalid(`models[${i}].model_alias`, `model_alias must be at most ${MAX_ALIAS_CHARS} characters.`);
    }
    if (model.contextWindow < 1n || model.contextWindow > MAX_CONTEXT_WINDOW) {
      throw invalid(`models[${i}].context_window`, "context_window must be an integer from 1 to 10000000.");
    }
    const kind = model.kind === "" ? "chat" : model.kind;
    if (kind !== "chat" && kind !== "embedding") {
      throw invalid(`models[${i}].kind`, "kind must be chat or embedding.");
    }
    const maxN = model.maxN === 0n ? 1n : model.maxN;
    if (maxN < 1n || maxN > MAX_N) throw invalid(`models[${i}].max_n`, `max_n must be an integer from 1 to ${MAX_N}.`);
    const canonicalId = validCanonicalId(model.canonicalId.trim() || modelId, `models[${i}].canonical_id`);
    const quantization = validQuantization(model.quantization || "unknown", `models[${i}].quantization`);
    return { modelId, modelAlias, contextWindow: model.contextWindow, kind, maxN, canonicalId, quantization };
  });
  return {
    name,
    email,
    endpoint,
    apiKey: req.apiKey,
    inviteCode: req.inviteCode.trim(),
    password: req.password,
    clientIp: req.clientIp,
    models,
  };
}
