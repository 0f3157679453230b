import type { FastifyInstance } from "fastify";
import { startChatCall } from "../chat/chat-call.ts";
import { providerPreferences } from "../routing/provider-preferences.ts";
import { relayCompletion } from "../chat/relay-completion.ts";
import { chatBodyFromResponses } from "../responses/request-translation.ts";
import { responsesBodySchema, type ResponsesBody } from "../responses/responses-body.ts";
import { responseContext } from "../responses/response-object.ts";
import { ResponseStreamTranslator } from "../responses/stream-translation.ts";
import type { RouteDeps } from "./route-deps.ts";
import { arrayOf, integer, jsonOrEventStream, number, object, string } from "./response-schemas.ts";

/**
 * POST /v1/responses: OpenAI's Responses API, stateless, as a translation at the edge onto the
 * chat path (one admission, one relay, one metering: startChatCall). The request becomes
 * a chat body, whose bytes are what the relay forwards; the answer's chat.completion (or
 * chunks) is translated back into a Response (or its event stream).
 */
export function responsesRoutes(app: FastifyInstance, deps: RouteDeps): void {
  app.post<{ Body: ResponsesBody }>(
    "/v1/responses",
    {
      onRequest: deps.auth({ allowScoped: true }),
      schema: {
        summary:
          "Create a model response (OpenAI Responses API, stateless: `input` items incl. function and custom " +
          "tool calls, function, custom and namespace `tools`, `text.format` json_schema, `stream`; no " +
          "`previous_response_id` or built-in tools)",
        description:
          "`usage.cost` is what the request is charged in USD, as on chat completions (`POST /v1/chat/completions`).",
        tags: ["chat"],
        security: [{ apiKey: [] }],
        body: responsesBodySchema,
        response: jsonOrEventStream(
          object({
            id: string(),
            object: string("`response`"),
            created_at: integer(),
            status: string(),
            model: string(),
            output: arrayOf(object({ type: string() })),
            usage: object({
              input_tokens: integer(),
              output_tokens: integer(),
              total_tokens: integer(),
              cost: number("What the request is charged, in USD"),
            }),
          }),
          "Responses API events (`event: response.created`, `response.output_text.delta`, ..., `response.completed`)",
        ),
      },
    },
    async (request, reply) => {
      const provider = providerPreferences(request.body.provider);
      const body = chatBodyFromResponses(request.body);
      const stream = body.stream === true;
      const bytes = Buffer.from(JSON.stringify(body));
      const { events, route } = await startChatCall(deps, request, reply, {
        body,
        bytes,
        promptParam: "input",
        provider,
      });
      const format = new ResponseStreamTranslator(responseContext(request.id, route.modelId, request.body));
      return relayCompletion(events, reply, {
        stream,
        format,
        onFirstEvent: () => deps.chatMetrics.firstEvent.observe({ stream: String(stream) }, reply.elapsedTime / 1000),
      });
    },
  );
}
