import { AppError } from "@mkt/runtime/errors";
import { isUuid, uuidV7Time } from "@mkt/runtime/ids";
import type { GetGenerationRequest, GetGenerationResponse } from "@mkt/proto/billing/v1/billing";
import { int8, type BillingContext } from "../context.ts";
import { ownerCondition, usageOwner } from "./usage-owner.ts";

/**
 * How far a record's time (its event's started_at) may be from the time in its UUIDv7 request id:
 * the edge takes both from its clock as the request arrives, so a day is ample.
 */
const V7_SLACK_MS = 24 * 3_600_000;

/**
 * The condition that finds a request's record among the monthly partitions of usage_records: a
 * UUIDv7 carries its time, so only the partitions around it are probed; an older v4 id probes the
 * key index of each (docs/adr/0045-usage-records-append.md).
 */
function recordWhere(requestId: string): { sql: string; params: string[] } {
  const minted = uuidV7Time(requestId);
  if (!minted) return { sql: "request_id = ?::uuid", params: [requestId] };
  return {
    sql: "request_id = ?::uuid and created_at between ?::timestamptz and ?::timestamptz",
    params: [
      requestId,
      new Date(minted.getTime() - V7_SLACK_MS).toISOString(),
      new Date(minted.getTime() + V7_SLACK_MS).toISOString(),
    ],
  };
}

/**
 * GetGeneration: one settled request of the owner, read from its usage record by its request id.
 * Someone else's request (another account's, or another subscription's for a scoped key) and a
 * request not settled yet are the same not_found as an unknown id: a caller learns nothing about
 * requests that are not its own.
 */
export async function generation(ctx: BillingContext, req: GetGenerationRequest): Promise<GetGenerationResponse> {
  const owner = usageOwner(req);
  const notFound = () => new AppError("not_found", "No such generation.", { param: "id" });
  // Request ids are the edge's UUIDs: anything else is no id of ours (and no key to look up).
  if (!isUuid(req.requestId)) throw notFound();
  const whose = ownerCondition(owner);
  const which = recordWhere(req.requestId);
  const [row] = await ctx.orm.em.fork().execute(
    `select request_id, to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as created_at,
       model_id, provider, hoster_id, input_tokens, output_tokens, cost_micros, latency_ms, time_to_first_token_ms,
       finish_reason, success, error_code, cached_input_tokens, reasoning_tokens
     from usage_records where ${which.sql} and ${whose.sql}`,
    [...which.params, ...whose.params],
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
      cachedTokens: int8(row.cached_input_tokens),
      reasoningTokens: int8(row.reasoning_tokens),
    },
  };
}
