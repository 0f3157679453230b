import { Readable } from "node:stream";
import type { ClientReadableStream } from "@grpc/grpc-js";
import type { FastifyReply } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import { microsToUsdText } from "@mkt/runtime/money";
import type { ExportUsageResponse, UsageExportRow } from "@mkt/proto/billing/v1/billing";
import { csvLine, csvText } from "./csv-line.ts";

/** The spec's export columns, in its order. */
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
] as const;

type Call = ClientReadableStream<ExportUsageResponse>;

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
  ]);
}

async function next(messages: AsyncIterator<ExportUsageResponse>): Promise<ExportUsageResponse | undefined> {
  try {
    const step = await messages.next();
    return step.done ? undefined : step.value;
  } catch (err) {
    throw AppError.fromGrpc(err);
  }
}

/**
 * Answers with billing's ExportUsage stream as a CSV file, one page at a time: the HTTP response
 * pulls pages through the gRPC stream, whose flow control holds billing back while the client is
 * slow, so memory stays at a few pages. Nothing is sent until the first page (or the stream's
 * end) arrives, so an early failure is an ordinary HTTP error; a later one cuts the response
 * (its chunked encoding never ends), which clients report as an error, not a complete file.
 * A client that goes away cancels the call.
 */
export async function sendUsageCsv(call: Call, reply: FastifyReply, filename: string): Promise<FastifyReply> {
  const cancel = () => call.cancel();
  reply.raw.once("close", cancel);
  const messages = call[Symbol.asyncIterator]() as AsyncIterator<ExportUsageResponse>;
  let first: ExportUsageResponse | undefined;
  try {
    first = await next(messages);
  } catch (err) {
    reply.raw.off("close", cancel);
    throw err;
  }

  async function* csv(): AsyncGenerator<string> {
    try {
      yield csvLine(EXPORT_COLUMNS);
      for (let page = first; page; page = await next(messages)) {
        let text = "";
        for (const row of page.rows) text += line(row);
        if (text) yield text;
      }
    } catch (err) {
      if (reply.raw.destroyed) return; // the client left; the cancelled call is why we are here
      throw err;
    } finally {
      reply.raw.off("close", cancel);
      call.cancel();
    }
  }
  return reply
    .header("content-type", "text/csv; charset=utf-8")
    .header("content-disposition", `attachment; filename="${filename}"`)
    .header("cache-control", "no-store")
    .send(Readable.from(csv(), { objectMode: false }));
}
