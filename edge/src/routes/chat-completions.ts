import type { FastifyInstance } from "fastify";
import { chatAnswerFormat } from "../chat/answer-format.ts";
import { chatBodySchema, refuseAudioOutput, type ChatBody } from "../chat/chat-body.ts";
import { startChatCall } from "../chat/chat-call.ts";
import { providerPreferences } from "../routing/provider-preferences.ts";
import { relayCompletion } from "../chat/relay-completion.ts";
import { rawJsonBody } from "../plugins/json-body.ts";
import type { RouteDeps } from "./route-deps.ts";
import { arrayOf, integer, jsonOrEventStream, nullableString, number, object, string } from "./response-schemas.ts";

/** OpenAI's chat.completion, with `usage.cost`; the upstream's other fields pass through. */
const chatCompletionSchema = object({
  id: string(),
  object: string("`chat.completion`"),
  created: integer(),
  model: string(),
  choices: arrayOf(
    object({
      index: integer(),
      message: object({ role: string(), content: nullableString() }),
      finish_reason: nullableString(),
    }),
  ),
  usage: object({
    prompt_tokens: integer(),
    completion_tokens: integer(),
    total_tokens: integer(),
    cost: number("What the request is charged, in USD"),
  }),
});

/**
 * POST /v1/chat/completions, the hot path (startChatCall): the answer's chunks are relayed as they
 * arrive from the upstream.
 */
export function chatCompletionRoutes(app: FastifyInstance, deps: RouteDeps): void {
  app.post<{ Body: ChatBody }>(
    "/v1/chat/completions",
    {
      onRequest: deps.auth({ allowScoped: true }),
      schema: {
        summary: "Create a chat completion (OpenAI-compatible; `stream` and `stream_options.include_usage`)",
        description:
          "The answer's `usage` (a streamed answer's last chunk when `stream_options.include_usage` is set) " +
          "carries `cost`, in USD: `usage.cost` is what the request is charged, the amount settlement posts " +
          "to the ledger and `GET /v1/generations/{id}` shows as `cost_usd`. The charge can only be less: " +
          "never more than the request's lease still holds (only a forged usage event meets that), and for " +
          "usage reaching billing after its lease's hold was released (an event held through an outage), never more than " +
          "the balance then has, the platform writing off the rest. A subscription's key is priced by its " +
          "plan: nothing on `free` and `subscription` plans; " +
          "a `subscription_overage` request pays the overage price on its tokens beyond the included tokens " +
          "it took when it was admitted.",
        tags: ["chat"],
        security: [{ apiKey: [] }],
        body: chatBodySchema,
        response: jsonOrEventStream(
          chatCompletionSchema,
          "`chat.completion.chunk` events, each `data: {...}`, ending with `data: [DONE]`",
        ),
      },
    },
    async (request, reply) => {
      const body = request.body;
      const stream = body.stream === true;
      refuseAudioOutput(body);
      // Forwarded as it came (validation changes nothing): serializing it again costs the main thread.
      const bytes = rawJsonBody(request) ?? Buffer.from(JSON.stringify(body));
      const { events, route } = await startChatCall(deps, request, reply, {
        body,
        bytes,
        promptParam: "messages",
        provider: providerPreferences(body.provider),
      });
      return relayCompletion(events, reply, {
        stream,
        format: chatAnswerFormat(route.modelId, request.id),
        onFirstEvent: () => deps.chatMetrics.firstEvent.observe({ stream: String(stream) }, reply.elapsedTime / 1000),
      });
    },
  );
}
