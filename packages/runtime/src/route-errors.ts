import { AppError } from "./errors.ts";

/** Echo a client's model name as OpenAI does, but bounded: a message must not grow with a hostile input. */
const shown = (model: string) => (model.length > 200 ? `${model.slice(0, 200)}…` : model);

/**
 * The model is unknown, or the caller may not use it (a scoped key naming another hoster's model
 * gets the same answer, so models cannot be probed). The edge's routing table answers with it.
 */
export function modelNotFound(model: string): AppError {
  return new AppError(
    "model_not_found",
    `The model \`${shown(model)}\` does not exist or you do not have access to it.`,
    { param: "model" },
  );
}

/** The model exists for the caller but no server of it is usable now (503 with retry-after). */
export function noHealthyUpstream(model: string): AppError {
  return new AppError("no_healthy_upstream", `No healthy server is available for the model \`${shown(model)}\`.`);
}
