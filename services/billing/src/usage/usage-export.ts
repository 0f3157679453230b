import type { ServerWritableStream } from "@grpc/grpc-js";
import { writeWithBackpressure } from "@mkt/runtime/grpc-server";
import type { ExportUsageRequest, ExportUsageResponse, UsageExportRow } from "@mkt/proto/billing/v1/billing";
import { sql } from "kysely";
import { billingDb } from "../billing-db.ts";
import { int8, type BillingContext, type Em } from "../context.ts";
import { ownerWhere, usageOwner, type UsageOwner } from "./usage-owner.ts";
import { reportWindow, requireDays, type ReportWindow } from "./usage-window.ts";

type ExportCall = ServerWritableStream<ExportUsageRequest, ExportUsageResponse>;

/**
 * Where the previous page ended: its last record's (created_at, request_id), the time as
 * PostgreSQL's text to the microsecond, so it makes no lossy round trip through a JavaScript Date.
 * The page after it starts after that pair, an index range scan of usage_records_account_time_idx.
 */
interface Cursor {
  at: string;
  requestId: string;
}

interface Batch {
  rows: UsageExportRow[];
  next: Cursor | undefined;
}

/**
 * One page of the export, by keyset: (created_at, request_id) after the cursor, in the order of
 * the index usage_records_account_time_idx, so every page is an index range scan however deep the
 * export is (an OFFSET would rescan what was already sent).
 */
async function readBatch(em: Em, owner: UsageOwner, window: ReportWindow, after: Cursor | undefined, limit: number) {
  const db = await billingDb(em);
  const owned = db
    .selectFrom("usage_records")
    .select((eb) => [
      sql<string>`to_char(${eb.ref("created_at")} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`.as("ts"),
      sql<string>`to_char(${eb.ref("created_at")} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`.as("at_exact"),
      "request_id",
      "model_id",
      "provider",
      "input_tokens",
      "output_tokens",
      "cost_micros",
      "latency_ms",
      "success",
      "cached_input_tokens",
    ])
    .where(ownerWhere(owner));
  const rows = await (
    after
      ? // After the cursor's row, its time bound as the text it was read as (to the microsecond).
        owned.where((eb) => eb(eb.refTuple("created_at", "request_id"), ">", eb.tuple(after.at, after.requestId)))
      : owned.where("created_at", ">=", window.from)
  )
    .where("created_at", "<", window.to)
    .orderBy("created_at")
    .orderBy("request_id")
    .limit(limit)
    .execute();
  const last = rows.at(-1);
  return {
    rows: rows.map((row) => ({
      timestamp: row.ts,
      modelId: row.model_id,
      provider: row.provider,
      inputTokens: int8(row.input_tokens),
      outputTokens: int8(row.output_tokens),
      costMicros: int8(row.cost_micros),
      latencyMs: int8(row.latency_ms),
      success: row.success,
      cachedTokens: int8(row.cached_input_tokens),
    })),
    // A short page is the last one.
    next: last && rows.length === limit ? { at: last.at_exact, requestId: last.request_id } : undefined,
  } satisfies Batch;
}

/**
 * ExportUsage: streams every usage record of the owner in the window (failed requests included), oldest
 * first, one keyset page per message. The next page is read while the current one is being sent,
 * and a full transport buffer pauses the reading, so memory stays bounded whatever the export's
 * size: the page being read plus the messages grpc-js queues before write() reports a full
 * buffer (16, its object-mode high-water mark) while the client's flow-control window is shut.
 * Pages are separate statements, not one long transaction: a record settled during the export
 * may or may not appear, but none appears twice or is skipped among those already there.
 */
export async function exportUsage(ctx: BillingContext, call: ExportCall): Promise<void> {
  const owner = usageOwner(call.request);
  const days = requireDays(call.request.days);
  const limit = ctx.config.USAGE_EXPORT_BATCH_SIZE;
  const em = ctx.orm.em.fork();
  const window = await reportWindow(em, ctx.clock(), days, "day");

  let pending: Promise<Batch> | undefined = readBatch(em, owner, window, undefined, limit);
  while (pending) {
    const batch: Batch = await pending;
    pending = batch.next ? readBatch(em, owner, window, batch.next, limit) : undefined;
    if (batch.rows.length === 0) break;
    if (!(await writeWithBackpressure(call, { rows: batch.rows }))) {
      // The caller left; the page being read is not wanted, and must not surface as unhandled.
      pending?.catch(() => undefined);
      return;
    }
  }
}
