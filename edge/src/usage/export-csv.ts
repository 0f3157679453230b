import { Readable } from "node:stream";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import type { ClientReadableStream } from "@grpc/grpc-js";
import type { FastifyReply } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import { microsToUsdText } from "@mkt/runtime/money";
import {
  BillingServiceService,
  UsageExportRow,
  type BillingServiceClient,
  type ExportUsageRequest,
} from "@mkt/proto/billing/v1/billing";
import { csvLine, csvText } from "./csv-line.ts";

/**
 * The spec's export columns, in its order, then ours: `cached_tokens` (of `input_tokens`, those
 * served from the upstream's prompt cache) last, so a reader of the spec's columns by position is
 * unaffected.
 */
export const EXPORT_COLUMNS = [
  "timestamp",
  "model",
  "provider",
  "input_tokens",
  "output_tokens",
  "total_tokens",
  "cost_usd",
  "latency_ms",
  "success",
  "cached_tokens",
] as const;

/** The call with its pages still encoded: each is decoded only when the response takes it. */
type Call = ClientReadableStream<Buffer>;

/**
 * Opens billing's ExportUsage stream with the pages left as bytes. grpc-js reads up to 16
 * messages ahead of a paused consumer: as bytes that is about 5 MB outside the JS heap, where 16
 * decoded pages of 5,000 rows would be some 20 MB of objects kept alive while a client is slow.
 */
export function openUsageExport(billing: BillingServiceClient, request: ExportUsageRequest): Call {
  const method = BillingServiceService.exportUsage;
  return billing.makeServerStreamRequest(method.path, method.requestSerialize, (bytes: Buffer) => bytes, request);
}

function line(row: UsageExportRow): string {
  return csvLine([
    row.timestamp,
    csvText(row.modelId),
    csvText(row.provider),
    row.inputTokens.toString(),
    row.outputTokens.toString(),
    (row.inputTokens + row.outputTokens).toString(),
    // Exact decimal text: a CSV is read back by spreadsheets and scripts, not as JSON numbers.
    microsToUsdText(row.costMicros),
    row.latencyMs.toString(),
    row.success ? "true" : "false",
    row.cachedTokens.toString(),
  ]);
}

/** `repeated UsageExportRow rows = 1` of ExportUsageResponse (billing.proto). */
const ROWS_FIELD = 1;
/** Rows turned into text before it is copied into the page's buffer (fewer copies, tiny graphs). */
const ROWS_PER_WRITE = 64;

/**
 * One page of the stream as CSV bytes. Its rows are decoded one at a time and their text copied
 * into one buffer every few rows, so a decoded page never exists: 5,000 decoded rows are a dense
 * graph of some 40,000 objects, and when a young-generation GC caught one alive, V8 moved the
 * memory pages holding it to the old generation with the garbage around them, 4–11 MB per GC,
 * kept until a full GC (docs/adr/0030-usage-report-windows-and-export.md).
 */
function csvPage(bytes: Uint8Array): Buffer {
  let out = Buffer.allocUnsafe(bytes.byteLength + (bytes.byteLength >> 1));
  let length = 0;
  let text = "";
  let rows = 0;
  const flush = () => {
    const needed = length + text.length * 3; // UTF-8 takes at most 3 bytes per UTF-16 unit
    if (needed > out.length) {
      const bigger = Buffer.allocUnsafe(Math.max(needed, out.length * 2));
      out.copy(bigger, 0, 0, length);
      out = bigger;
    }
    length += out.write(text, length);
    text = "";
    rows = 0;
  };
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field !== ROWS_FIELD || wireType !== WireType.LengthDelimited) {
      reader.skip(wireType, field);
      continue;
    }
    text += line(UsageExportRow.decode(reader, reader.uint32()));
    if (++rows === ROWS_PER_WRITE) flush();
  }
  flush();
  return out.subarray(0, length);
}

/**
 * Answers with billing's ExportUsage stream as a CSV file. Each page becomes CSV bytes as the
 * response takes it; once the body holds more than its high-water mark (the client reads slower
 * than billing sends), the call is paused until the body is read again, so gRPC flow control
 * holds billing back. Pages come from 'data' events and are done with inside them; the call's
 * async iterator, used before, kept decoded pages alive across young-generation GCs.
 *
 * Nothing is sent until the first page (or the stream's end) arrives, so an early failure is an
 * ordinary HTTP error; a later one cuts the response (its chunked encoding never ends), which
 * clients report as an error, not a complete file. A client that goes away cancels the call.
 */
export async function sendUsageCsv(call: Call, reply: FastifyReply, filename: string): Promise<FastifyReply> {
  const body = new Readable({
    read: () => call.resume(),
    destroy: (err, callback) => {
      call.cancel(); // a no-op once the call has ended
      callback(err);
    },
  });
  body.push(csvLine(EXPORT_COLUMNS));
  let sending = false;
  let failure: AppError | undefined;
  const started = new Promise<void>((resolve, reject) => {
    const fail = (error: AppError) => {
      if (failure) return;
      failure = error;
      if (sending) {
        // Fastify logs it and cuts the response; a no-op when the client has left (the cause).
        body.destroy(error);
      } else {
        body.destroy();
        reject(error);
      }
    };
    call.on("data", (bytes: Buffer) => {
      if (failure) return;
      resolve();
      let csv: Buffer;
      try {
        csv = csvPage(bytes);
      } catch (err) {
        reply.log.error({ err }, "an ExportUsage page did not decode");
        fail(new AppError("internal_error", "Internal error."));
        return;
      }
      if (csv.length > 0 && !body.push(csv)) call.pause();
    });
    call.on("end", () => {
      resolve();
      body.push(null);
    });
    call.on("error", (err) => fail(AppError.fromGrpc(err)));
  });
  // Until Fastify holds the body, nothing else notices the client leaving.
  reply.raw.once("close", () => body.destroy());
  await started;
  if (failure) throw failure; // it came with the first page, before any byte was sent
  sending = true;
  return reply
    .header("content-type", "text/csv; charset=utf-8")
    .header("content-disposition", `attachment; filename="${filename}"`)
    .header("cache-control", "no-store")
    .send(body);
}
