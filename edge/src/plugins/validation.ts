import { Ajv, type ErrorObject } from "ajv";
import type { FastifyInstance, FastifySchemaValidationError } from "fastify";
import { AppError } from "@mkt/runtime/errors";

/**
 * Route schemas validate input (and document it at /docs). Bodies are checked as sent: no type
 * coercion, no removed fields, since a chat body is passed on to the model server; query strings
 * and path parameters arrive as text and are coerced to the schema's types.
 */
const common = { removeAdditional: false, allErrors: false, allowUnionTypes: true } as const;
const bodyAjv = new Ajv({ ...common, coerceTypes: false, useDefaults: false });
const textAjv = new Ajv({ ...common, coerceTypes: true, useDefaults: true });
for (const ajv of [bodyAjv, textAjv]) ajv.addKeyword("example");

/** The check Fastify runs on a route's body, as the routes get it (bench/body-validation.ts times it). */
export const compileBodyValidator = (schema: object) => bodyAjv.compile(schema);

/** The field a validation error is about, as OpenAI names it in `param` (`messages[0].role`). */
function paramOf(error: FastifySchemaValidationError | ErrorObject): string | undefined {
  const path = (error.instancePath ?? "")
    .split("/")
    .filter((part) => part !== "")
    .map((part) => (/^\d+$/.test(part) ? `[${part}]` : `.${part}`))
    .join("")
    .replace(/^\./, "");
  // A missing or unexpected field is reported on its parent; name the field itself.
  const params = error.params as { missingProperty?: string; additionalProperty?: string } | undefined;
  const field = params?.missingProperty ?? params?.additionalProperty;
  if (field) return path ? `${path}.${field}` : field;
  return path || undefined;
}

// eslint-disable-next-line no-control-regex
const CONTROL_CHARACTER = /[\x00-\x1f\x7f]/;

/**
 * Path parameters and query values are identifiers, numbers and enum words: none holds a control
 * character, and a NUL would reach Postgres (which cannot store one) as a 500. Refused for every
 * route at once, naming the parameter.
 */
function refuseControlCharacters(values: unknown): void {
  if (!values || typeof values !== "object") return;
  for (const [name, value] of Object.entries(values)) {
    const texts = Array.isArray(value) ? value : [value];
    if (texts.some((text) => typeof text === "string" && CONTROL_CHARACTER.test(text))) {
      throw new AppError("invalid_request", `Invalid \`${name}\`: it holds a control character.`, { param: name });
    }
  }
}

export function installValidation(app: FastifyInstance): void {
  app.addHook("preValidation", async (request) => {
    refuseControlCharacters(request.params);
    refuseControlCharacters(request.query);
  });
  app.setValidatorCompiler(({ schema, httpPart }) =>
    httpPart === "body" ? compileBodyValidator(schema) : textAjv.compile(schema),
  );
  app.setSchemaErrorFormatter((errors, dataVar) => {
    const first = errors[0];
    const param = first ? paramOf(first) : undefined;
    const where = param ?? dataVar;
    const message = first?.message ? `Invalid \`${where}\`: ${first.message}.` : `Invalid ${dataVar}.`;
    return new AppError("invalid_request", message, { param: param ?? (dataVar === "body" ? "body" : undefined) });
  });
}
