/**
 * Building blocks of the routes' `response` schemas, which the OpenAPI document at /docs shows
 * and Fastify serializes with. Under a schema Fastify drops undeclared properties and coerces
 * declared ones to their type, so every object here is open (`additionalProperties: true`: a
 * field a schema forgets still arrives) and a field that can be null says so. Answers the route
 * sends as text (chat and Responses answers, streamed or not, CSV exports) are never serialized
 * by these schemas: for them the schema documents the content type.
 */

type Schema = Record<string, unknown>;

export const string = (description?: string): Schema => ({ type: "string", ...(description && { description }) });
export const nullableString = (description?: string): Schema => ({
  type: ["string", "null"],
  ...(description && { description }),
});
export const integer = (description?: string): Schema => ({ type: "integer", ...(description && { description }) });
export const number = (description?: string): Schema => ({ type: "number", ...(description && { description }) });
export const nullableNumber = (description?: string): Schema => ({
  type: ["number", "null"],
  ...(description && { description }),
});
export const boolean = (description?: string): Schema => ({ type: "boolean", ...(description && { description }) });
/** A USD amount rendered from integer micro-USD. */
export const usd = (description?: string): Schema => number(description ?? "USD");

/** An object with these documented properties, open to others. */
export function object(properties: Record<string, Schema>, description?: string): Schema {
  return { type: "object", additionalProperties: true, properties, ...(description && { description }) };
}

export const arrayOf = (items: Schema, description?: string): Schema => ({
  type: "array",
  items,
  ...(description && { description }),
});

/** OpenAI's list envelope: `{"object": "list", "data": [...]}`. */
export const listOf = (item: Schema, description?: string): Schema =>
  object({ object: string("`list`"), data: arrayOf(item) }, description);

/** The one error shape every refusal and failure has (AppError.toBody). */
export const errorBody: Schema = object(
  {
    error: object({
      message: string(),
      type: string(),
      param: nullableString("The request field at fault, when one is"),
      code: string(),
    }),
  },
  'OpenAI\'s error shape: `{"error": {"message", "type", "param", "code"}}`',
);

/** The error responses every route can give. */
export const errorResponses = { "4xx": errorBody, "5xx": errorBody } as const;

/** A route's responses: `status` with `schema`, and the shared error shape. */
export function replies(status: number, schema: Schema): Record<string, Schema> {
  return { [status]: schema, ...errorResponses };
}

/**
 * A 200 that is JSON (`json`) or, when the client asked for `stream`, server-sent events. The
 * route sends both as text, so neither is serialized by these schemas.
 */
export function jsonOrEventStream(json: Schema, events: string): Record<string, Schema> {
  return {
    200: {
      description: "The answer, as JSON; with `stream: true`, server-sent events (`text/event-stream`)",
      content: {
        "application/json": { schema: json },
        "text/event-stream": { schema: { type: "string", description: events } },
      },
    },
    ...errorResponses,
  };
}

/** Anthropic's error shape, which the Messages API's routes answer with (messages/anthropic-errors.ts). */
export const anthropicErrorBody: Schema = object(
  {
    type: string("`error`"),
    error: object({
      type: string("Anthropic's error type, e.g. `invalid_request_error`"),
      message: string(),
      param: nullableString("The request field at fault, when one is"),
      code: string("Our error code, as in OpenAI-shaped errors"),
    }),
    request_id: string(),
  },
  'Anthropic\'s error shape: `{"type": "error", "error": {"type", "message"}}`, with our `code` beside',
);

/** The Messages API's error responses. */
export const anthropicErrorResponses = { "4xx": anthropicErrorBody, "5xx": anthropicErrorBody } as const;
