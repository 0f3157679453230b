import { AppError } from "@mkt/runtime/errors";
import type { GetGenerationRequest, GetGenerationResponse } from "@mkt/proto/billing/v1/billing";
import { int8, type BillingContext } from "../context.ts";
import { ownerCondition, usageOwner } from "./usage-owner.ts";

/** Request ids are the edge's UUIDs; anything far longer is no id of ours (and no key to look up). */
const MAX_REQUEST_ID_LENGTH = 128;

/**
 * GetGeneration: one settled request of the owner, read from its usage record by primary key.
 * Someone else's request (another account's, or another subscription's for a scoped key) and a
 * request not settled yet are the same not_found as an unknown id: a caller learns nothing about
 * requests that are not its own.
 */
export async function generation(ctx: BillingContext, req: GetGenerationRequest): Promise<GetGenerationResponse> {
  const owner = usageOwner(req);
  const notFound = () => new AppError("not_found", "No such generation.", { param: "id" });
  if (req.requestId === "" || req.requestId.length > MAX_REQUEST_ID_LENGTH) throw notFound();
  const whose = ownerCondition(owner);
  const [row] = await ctx.orm.em.fork().execute(
    `select request_id, to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as created_at,
       model_id, provider, hoster_id, input_tokens, output_tokens, cost_micros, latency_ms, time_to_first_token_ms,
       finish_reason, success, error_code
     from usage_records where request_id = ? and ${whose.sql}`,
    [req.requestId, ...whose.params],
  );
  if (!row) throw notFound();
  return {
    generation: {
      requestId: row.request_id as string,
      createdAt: row.created_at as string,
      modelId: row.model_id as string,
      provider: row.provider as string,
      hosterId: row.hoster_id as string,
      inputTokens: int8(row.input_tokens),
      outputTokens: int8(row.output_tokens),
      costMicros: int8(row.cost_micros),
      latencyMs: int8(row.latency_ms),
      timeToFirstTokenMs: row.time_to_first_token_ms === null ? undefined : int8(row.time_to_first_token_ms),
      finishReason: row.finish_reason as string,
      success: row.success as boolean,
      errorCode: row.error_code as string,
    },
  };
}
