import type { FastifyInstance } from "fastify";
import { startChatCall } from "../chat/chat-call.ts";
import { relayCompletion } from "../chat/relay-completion.ts";
import { answerCutoff } from "../leases/isolation-watch.ts";
import { chatBodyFromResponses } from "../responses/request-translation.ts";
import { responsesBodySchema, type ResponsesBody } from "../responses/responses-body.ts";
import { responseContext } from "../responses/response-object.ts";
import { ResponseStreamTranslator } from "../responses/stream-translation.ts";
import type { RouteDeps } from "./route-deps.ts";

/**
 * POST /v1/responses: OpenAI's Responses API, stateless, as a translation at the edge onto the
 * chat path (one admission, one registry relay, one metering: startChatCall). The request becomes
 * a chat body, whose bytes are what the registry forwards; the answer's chat.completion (or
 * chunks) is translated back into a Response (or its event stream).
 */
export function responsesRoutes(app: FastifyInstance, deps: RouteDeps): void {
  app.post<{ Body: ResponsesBody }>(
    "/v1/responses",
    {
      onRequest: deps.auth({ allowScoped: true }),
      schema: {
        summary:
          "Create a model response (OpenAI Responses API, stateless: `input` items incl. function calls, " +
          "function `tools`, `text.format` json_schema, `stream`; no `previous_response_id` or built-in tools)",
        description:
          "`usage.cost` is what the request is charged in USD, as on chat completions (`POST /v1/chat/completions`).",
        tags: ["chat"],
        security: [{ apiKey: [] }],
        body: responsesBodySchema,
      },
    },
    async (request, reply) => {
      const body = chatBodyFromResponses(request.body);
      const stream = body.stream === true;
      const bytes = Buffer.from(JSON.stringify(body));
      const { call, route, reportCut } = await startChatCall(deps, request, reply, {
        body,
        bytes,
        promptParam: "input",
      });
      const format = new ResponseStreamTranslator(responseContext(request.id, route.modelId, request.body));
      return relayCompletion(call, reply, {
        stream,
        format,
        shutdown: answerCutoff(deps.shutdown, deps.isolation),
        onCut: reportCut,
        onFirstEvent: () => deps.chatMetrics.firstEvent.observe({ stream: String(stream) }, reply.elapsedTime / 1000),
      });
    },
  );
}
