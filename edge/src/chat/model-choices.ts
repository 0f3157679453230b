import { AppError } from "@mkt/runtime/errors";

/** The most models one request may name, `model` and its `models` fallbacks together. */
export const MAX_MODELS = 5;

/** A model the client named, and the request field that named it (what an error's `param` says). */
export interface ModelChoice {
  name: string;
  param: "model" | "models";
}

/**
 * The models a chat request asks for, in the order to try them (OpenRouter's convention): `model`,
 * then the `models` fallbacks. The two may come together, as they must from the `openai` SDK,
 * whose types require `model`; a fallback repeating an earlier name is tried once. The schema
 * has checked each field's type and `models`' length (1 to MAX_MODELS); the list as a whole is
 * checked here.
 */
export function modelChoices(body: { model?: string | null; models?: readonly string[] | null }): ModelChoice[] {
  const choices: ModelChoice[] = body.model ? [{ name: body.model, param: "model" }] : [];
  for (const name of body.models ?? []) {
    if (!choices.some((c) => c.name === name)) choices.push({ name, param: "models" });
  }
  if (choices.length === 0) {
    throw new AppError("invalid_request", "You must provide a model parameter (`model` or `models`).", {
      param: "model",
    });
  }
  if (choices.length > MAX_MODELS) {
    throw new AppError(
      "invalid_request",
      `Invalid \`models\`: at most ${MAX_MODELS} models may be named, \`model\` included.`,
      { param: "models" },
    );
  }
  return choices;
}
