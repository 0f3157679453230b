import type { FastifyInstance } from "fastify";
import { GetGenerationRequest, type Generation } from "@mkt/proto/billing/v1/billing";
import { AppError } from "@mkt/runtime/errors";
import { microsToUsd } from "@mkt/runtime/money";
import { usageOwnerOf } from "../plugins/api-key-auth.ts";
import type { RouteDeps } from "./route-deps.ts";
import { integer, nullableNumber, nullableString, object, replies, string, usd } from "./response-schemas.ts";

/** The prefixes of the ids our answers carry: a chat completion's, a Response's, a Message's. */
const ID_PREFIXES = ["chatcmpl-", "resp_", "msg_"];

/** The request id inside an answer's id, or the id itself when it is a bare request id. */
export function requestIdOf(id: string): string {
  const prefix = ID_PREFIXES.find((p) => id.startsWith(p));
  return prefix ? id.slice(prefix.length) : id;
}

function renderGeneration(g: Generation) {
  return {
    id: `chatcmpl-${g.requestId}`,
    object: "generation",
    request_id: g.requestId,
    created_at: g.createdAt,
    model: g.modelId,
    provider: g.provider,
    hoster_id: g.hosterId || null,
    input_tokens: Number(g.inputTokens),
    cached_tokens: Number(g.cachedTokens),
    output_tokens: Number(g.outputTokens),
    reasoning_tokens: Number(g.reasoningTokens),
    total_tokens: Number(g.inputTokens + g.outputTokens),
    cost_usd: microsToUsd(g.costMicros),
    latency_ms: Number(g.latencyMs),
    time_to_first_token_ms: g.timeToFirstTokenMs === undefined ? null : Number(g.timeToFirstTokenMs),
    finish_reason: g.finishReason || null,
    status: g.success ? "success" : "failure",
    error_code: g.errorCode || null,
  };
}

/**
 * GET /v1/generations/{id}: one of the caller's requests as settlement recorded it
 * (docs/architecture.md#settlement). Read like the usage reports: a scoped key sees its subscription's requests
 * only. Anyone else's request, and one not settled yet, is 404 like an unknown id.
 */
export function generationRoutes(app: FastifyInstance, deps: RouteDeps): void {
  app.get<{ Params: { id: string } }>(
    "/v1/generations/:id",
    {
      onRequest: deps.auth({ allowScoped: true, acceptSession: true }),
      schema: {
        summary: "One of your requests: model, provider, tokens, cost, latency, time to first token, outcome",
        response: replies(
          200,
          object({
            id: string(),
            object: string("`generation`"),
            request_id: string(),
            created_at: string(),
            model: string(),
            provider: string(),
            hoster_id: nullableString(),
            input_tokens: integer(),
            cached_tokens: integer("Of `input_tokens`, those served from the upstream's prompt cache"),
            output_tokens: integer(),
            reasoning_tokens: integer("Of `output_tokens`, those the model spent reasoning"),
            total_tokens: integer(),
            cost_usd: usd(),
            latency_ms: integer(),
            time_to_first_token_ms: nullableNumber(),
            finish_reason: nullableString(),
            status: string("`success` or `failure`"),
            error_code: nullableString(),
          }),
        ),
        description:
          "`id` is a chat completion's `id` (`chatcmpl-<request id>`), a Response's (`resp_<request id>`) or " +
          "the bare request id (the `x-request-id` header). A request is found once it has settled, about a " +
          "second after its answer ended; until then, and for anyone else's request, the answer is 404. " +
          "`cost_usd` is what was charged (cached input tokens at the plan's or model's cached price); `time_to_first_token_ms` and `finish_reason` are null when no token " +
          "reached the caller; `status` is `success` or `failure` (then `error_code` says why).",
        tags: ["usage"],
        security: [{ apiKey: [] }],
        params: {
          type: "object",
          properties: {
            id: {
              type: "string",
              maxLength: 64,
              description: "The answer's id or its request id",
              example: "chatcmpl-01a21233-951b-7e4f-8a7b-9c0d1e2f3a4b",
            },
          },
        },
      },
    },
    async (request) => {
      const { generation } = await deps.backends.billing.getGeneration(
        GetGenerationRequest.fromPartial({ ...usageOwnerOf(request), requestId: requestIdOf(request.params.id) }),
      );
      if (!generation) throw new AppError("not_found", "No such generation.", { param: "id" });
      return renderGeneration(generation);
    },
  );
}
