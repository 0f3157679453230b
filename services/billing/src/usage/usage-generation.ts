import { AppError } from "@mkt/runtime/errors";
import { isUuid, uuidV7Time } from "@mkt/runtime/ids";
import type { GetGenerationRequest, GetGenerationResponse } from "@mkt/proto/billing/v1/billing";
import { sql, type Expression, type ExpressionBuilder, type SqlBool } from "kysely";
import { billingDb, type BillingDb } from "../billing-db.ts";
import { int8, type BillingContext } from "../context.ts";
import { ownerWhere, usageOwner } from "./usage-owner.ts";

/**
 * How far a record's time (its event's started_at) may be from the time in its UUIDv7 request id:
 * the edge takes both from its clock as the request arrives, so a day is ample.
 */
const V7_SLACK_MS = 24 * 3_600_000;

/**
 * The condition that finds a request's record among the monthly partitions of usage_records: a
 * UUIDv7 carries its time, so only the partitions around it are probed; an older v4 id probes the
 * key index of each (docs/adr/0045-usage-records-append.md). Times are bound as the driver reads
 * them (BillingDb): as ISO text.
 */
function recordWhere(requestId: string): (eb: ExpressionBuilder<BillingDb, "usage_records">) => Expression<SqlBool> {
  const minted = uuidV7Time(requestId);
  if (!minted) return (eb) => eb("request_id", "=", requestId);
  const from = new Date(minted.getTime() - V7_SLACK_MS).toISOString();
  const to = new Date(minted.getTime() + V7_SLACK_MS).toISOString();
  return (eb) => eb.and([eb("request_id", "=", requestId), eb.between("created_at", from, to)]);
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
  const db = await billingDb(ctx.orm.em.fork());
  const row = await db
    .selectFrom("usage_records")
    .select((eb) => [
      "request_id",
      sql<string>`to_char(${eb.ref("created_at")} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`.as(
        "created_at",
      ),
      "model_id",
      "provider",
      "hoster_id",
      "input_tokens",
      "output_tokens",
      "cost_micros",
      "latency_ms",
      "time_to_first_token_ms",
      "finish_reason",
      "success",
      "error_code",
      "cached_input_tokens",
      "reasoning_tokens",
    ])
    .where(recordWhere(req.requestId))
    .where(ownerWhere(owner))
    .executeTakeFirst();
  if (!row) throw notFound();
  return {
    generation: {
      requestId: row.request_id,
      createdAt: row.created_at,
      modelId: row.model_id,
      provider: row.provider,
      hosterId: row.hoster_id,
      inputTokens: int8(row.input_tokens),
      outputTokens: int8(row.output_tokens),
      costMicros: int8(row.cost_micros),
      latencyMs: int8(row.latency_ms),
      timeToFirstTokenMs: row.time_to_first_token_ms === null ? undefined : int8(row.time_to_first_token_ms),
      finishReason: row.finish_reason,
      success: row.success,
      errorCode: row.error_code,
      cachedTokens: int8(row.cached_input_tokens),
      reasoningTokens: int8(row.reasoning_tokens),
    },
  };
}
