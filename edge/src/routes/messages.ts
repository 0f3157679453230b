import type { FastifyInstance } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import { candidateRoutes } from "../chat/candidate-routes.ts";
import { startChatCall } from "../chat/chat-call.ts";
import { providerPreferences } from "../routing/provider-preferences.ts";
import { relayCompletion } from "../chat/relay-completion.ts";
import { installAnthropicErrorHandler } from "../messages/anthropic-errors.ts";
import { messageContext, thinkingOn } from "../messages/message-object.ts";
import {
  countTokensBodySchema,
  messagesBodySchema,
  type CountTokensBody,
  type MessagesBody,
} from "../messages/messages-body.ts";
import { chatBodyFromMessages, chatPrompt } from "../messages/request-translation.ts";
import { MessageStreamTranslator } from "../messages/stream-translation.ts";
import { principalOf } from "../plugins/api-key-auth.ts";
import type { RouteDeps } from "./route-deps.ts";
import {
  anthropicErrorResponses,
  arrayOf,
  integer,
  nullableString,
  number,
  object,
  string,
} from "./response-schemas.ts";

/** Anthropic's Message object, as documented (the answer is sent as text, never serialized by it). */
const messageSchema = object({
  id: string("`msg_…`, our request id"),
  type: string("`message`"),
  role: string("`assistant`"),
  model: string(),
  content: arrayOf(object({ type: string("`text` or `tool_use`") })),
  stop_reason: nullableString("`end_turn`, `max_tokens`, `tool_use`, `stop_sequence` or `refusal`"),
  stop_sequence: nullableString(),
  usage: object({ input_tokens: integer(), output_tokens: integer(), cost: number("USD charged") }),
});

/** Anthropic's SDKs send their version and betas as headers (and `?beta=true`): all accepted. */
const anthropicHeaders = {
  type: "object",
  properties: { "anthropic-version": { type: "string" }, "anthropic-beta": { type: "string" } },
} as const;
const betaQuery = { type: "object", properties: { beta: { type: "string" } } } as const;

/**
 * POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API, as a translation at
 * the edge onto the chat path (one admission, one relay, one metering: startChatCall), in a scope
 * of its own whose errors are Anthropic-shaped. The key comes as `x-api-key` or as
 * `Authorization: Bearer`, as Anthropic's clients send one or the other.
 */
export async function messagesRoutes(scope: FastifyInstance, deps: RouteDeps): Promise<void> {
  installAnthropicErrorHandler(scope);
  const auth = deps.auth({ allowScoped: true, acceptXApiKey: true });

  scope.post<{ Body: MessagesBody }>(
    "/v1/messages",
    {
      onRequest: auth,
      schema: {
        summary:
          "Create a message (Anthropic Messages API: system, text and image blocks, client tools, `stream`; " +
          "`max_tokens` above what the model serves is lowered to it)",
        description:
          "Errors are Anthropic-shaped (`{type: 'error', error: {type, message, code}}`). `usage.cost` is what " +
          "the request is charged in USD, as on chat completions (`POST /v1/chat/completions`).",
        tags: ["chat"],
        security: [{ apiKey: [] }],
        headers: anthropicHeaders,
        querystring: betaQuery,
        body: messagesBodySchema,
        response: {
          200: {
            description: "The Message, as JSON; with `stream: true`, server-sent events (`text/event-stream`)",
            content: {
              "application/json": { schema: messageSchema },
              "text/event-stream": {
                schema: {
                  type: "string",
                  description:
                    "`message_start`, `ping`, `content_block_start` / `_delta` / `_stop`, `message_delta` " +
                    "(stop_reason, usage with `cost`), `message_stop`; a failure after the first byte is an `error` event",
                },
              },
            },
          },
          ...anthropicErrorResponses,
        },
      },
    },
    async (request, reply) => {
      const body = request.body;
      const provider = providerPreferences(body.provider);
      const chat = chatBodyFromMessages(body);
      const stream = body.stream === true;
      const bytes = Buffer.from(JSON.stringify(chat));
      const started = await startChatCall(deps, request, reply, {
        body: chat,
        bytes,
        promptParam: "messages",
        provider,
      });
      return relayCompletion(started.events, reply, {
        stream,
        format: new MessageStreamTranslator(messageContext(request.id, started.route.modelId, thinkingOn(body))),
        onFirstEvent: () => deps.chatMetrics.firstEvent.observe({ stream: String(stream) }, reply.elapsedTime / 1000),
      });
    },
  );

  // Counted by the tokenizer admission counts with, so the figure is what a message would be
  // admitted at. Nothing is admitted or charged; the work is bounded as admission's is (a large
  // prompt waits in its account's line, 429 when too many wait).
  scope.post<{ Body: CountTokensBody }>(
    "/v1/messages/count_tokens",
    {
      onRequest: auth,
      schema: {
        summary: "Count the tokens of a message's prompt (Anthropic Messages API); free, nothing is admitted",
        tags: ["chat"],
        security: [{ apiKey: [] }],
        headers: anthropicHeaders,
        querystring: betaQuery,
        body: countTokensBodySchema,
        response: { 200: object({ input_tokens: integer() }), ...anthropicErrorResponses },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      const [route] = await candidateRoutes(deps, principal.scope, [{ name: request.body.model, param: "model" }]);
      const chat = chatPrompt(request.body);
      const limit = Number(route!.contextWindow);
      const tokens = await deps.promptTokens.count({
        accountId: principal.accountId,
        body: Buffer.from(JSON.stringify(chat)),
        messages: chat.messages,
        tools: chat.tools,
        limit,
      });
      if (tokens > limit) {
        throw new AppError(
          "context_length_exceeded",
          `This model's maximum context length is ${limit} tokens, but the messages use more than ${limit} tokens.`,
          { param: "messages" },
        );
      }
      return { input_tokens: tokens };
    },
  );
}
