import type { FastifyInstance } from "fastify";
import { chatAnswerFormat } from "../chat/answer-format.ts";
import { chatBodySchema, refuseAudioOutput, type ChatBody } from "../chat/chat-body.ts";
import { startChatCall } from "../chat/chat-call.ts";
import { relayCompletion } from "../chat/relay-completion.ts";
import { answerCutoff } from "../leases/isolation-watch.ts";
import { rawJsonBody } from "../plugins/json-body.ts";
import type { RouteDeps } from "./route-deps.ts";

/**
 * POST /v1/chat/completions, the hot path (DESIGN.md §2; startChatCall): the answer's events are
 * relayed as they arrive, as the registry sends them.
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
          "usage reaching billing after its lease's hold was released (an outbox replay), never more than " +
          "the balance then has, the platform writing off the rest. A subscription's key is priced by its " +
          "plan: nothing on `free` and `subscription` plans; " +
          "a `subscription_overage` request pays the overage price on its tokens beyond the included tokens " +
          "it took when it was admitted.",
        tags: ["chat"],
        security: [{ apiKey: [] }],
        body: chatBodySchema,
      },
    },
    async (request, reply) => {
      const body = request.body;
      const stream = body.stream === true;
      refuseAudioOutput(body);
      // Forwarded as it came (validation changes nothing): serializing it again costs the main thread.
      const bytes = rawJsonBody(request) ?? Buffer.from(JSON.stringify(body));
      const { call, route, reportCut } = await startChatCall(deps, request, reply, {
        body,
        bytes,
        promptParam: "messages",
      });
      return relayCompletion(call, reply, {
        stream,
        format: chatAnswerFormat(route.modelId, request.id),
        shutdown: answerCutoff(deps.shutdown, deps.isolation),
        onCut: reportCut,
        onFirstEvent: () => deps.chatMetrics.firstEvent.observe({ stream: String(stream) }, reply.elapsedTime / 1000),
      });
    },
  );
}
