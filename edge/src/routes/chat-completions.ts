import type { FastifyInstance, FastifyReply } from "fastify";
import { AuthorizeRequest, type RateLimitStatus } from "@mkt/proto/billing/v1/billing";
import { ChatCompletionRequest, ResolveRouteRequest } from "@mkt/proto/registry/v1/registry";
import { AppError } from "@mkt/runtime/errors";
import { principalOf } from "../plugins/api-key-auth.ts";
import { chatBodySchema, type ChatBody } from "../chat/chat-body.ts";
import { relayCompletion } from "../chat/relay-completion.ts";
import type { RouteDeps } from "./route-deps.ts";

function rateLimitHeaders(reply: FastifyReply, limits: RateLimitStatus | undefined): void {
  if (!limits) return;
  reply.header("x-ratelimit-limit-requests", String(limits.limitPerMinute));
  reply.header("x-ratelimit-remaining-requests", String(limits.remainingThisMinute));
  reply.header("x-ratelimit-reset-requests", `${limits.resetSeconds}s`);
}

/**
 * POST /v1/chat/completions, the hot path (DESIGN.md §2): cached authentication, route
 * resolution, one Authorize (rate limits + credit reservation), then one streaming gRPC call whose
 * events are relayed as they arrive. Settlement happens later, from the usage event.
 */
export function chatCompletionRoutes(app: FastifyInstance, deps: RouteDeps): void {
  app.post<{ Body: ChatBody }>(
    "/v1/chat/completions",
    {
      onRequest: deps.auth({ allowScoped: true }),
      schema: {
        summary: "Create a chat completion (OpenAI-compatible; `stream` and `stream_options.include_usage`)",
        tags: ["chat"],
        security: [{ apiKey: [] }],
        body: chatBodySchema,
      },
    },
    async (request, reply) => {
      const receivedAt = Date.now();
      const principal = principalOf(request);
      const body = request.body;
      const stream = body.stream === true;

      const route = await deps.routes.get(body.model, principal.scope, async () => {
        const resolved = await deps.backends.registry.resolveRoute(
          ResolveRouteRequest.fromPartial({ model: body.model, scope: principal.scope }),
        );
        return resolved.route;
      });
      if (!route)
        throw new AppError("model_not_found", `The model \`${body.model}\` does not exist.`, { param: "model" });

      const bodyBytes = Buffer.from(JSON.stringify(body));
      const promptTokens = await deps.promptTokens.count(bodyBytes, body.messages);
      const requested = body.max_completion_tokens ?? body.max_tokens ?? 0;
      const choices = body.n ?? 1;
      const authorizing = performance.now();
      const grant = await deps.backends.authorize(
        AuthorizeRequest.fromPartial({
          requestId: request.id,
          accountId: principal.accountId,
          keyId: principal.keyId,
          tier: principal.tier,
          modelId: route.modelId,
          provider: route.provider,
          hosterId: route.hosterId,
          inputPricePer1mMicros: route.inputPricePer1mMicros,
          outputPricePer1mMicros: route.outputPricePer1mMicros,
          contextWindow: route.contextWindow,
          maxOutputTokensCap: route.maxOutputTokensCap,
          inputTokens: BigInt(promptTokens),
          requestedMaxOutputTokens: BigInt(requested),
          // A scoped key's subscription is checked in Authorize's transaction, not from the cache.
          subscriptionId: principal.scope?.subscriptionId ?? "",
          choices: BigInt(choices),
        }),
      );
      deps.chatMetrics.authorize.observe((performance.now() - authorizing) / 1000);
      rateLimitHeaders(reply, grant.rateLimit);

      const call = deps.backends.registryStream.chatCompletion(
        ChatCompletionRequest.fromPartial({
          requestId: request.id,
          reservationId: grant.reservationId,
          accountId: principal.accountId,
          keyId: principal.keyId,
          route,
          body: bodyBytes,
          stream,
          includeUsage: body.stream_options?.include_usage === true,
          maxOutputTokens: grant.maxOutputTokens,
          promptTokens: BigInt(promptTokens),
          receivedAtMs: BigInt(receivedAt),
          choices: BigInt(choices),
          releaseSlot: grant.holdsSlot,
        }),
      );
      return relayCompletion(call, reply, {
        stream,
        model: route.modelId,
        requestId: request.id,
        shutdown: deps.shutdown,
        onFirstEvent: () => deps.chatMetrics.firstEvent.observe({ stream: String(stream) }, reply.elapsedTime / 1000),
      });
    },
  );
}
