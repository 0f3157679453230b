import type { ServerWritableStream } from "@grpc/grpc-js";
import Fastify, { type FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { createClient } from "@mkt/runtime/grpc-client";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { BILLING_CALLERS } from "../../services/billing/src/billing-callers.ts";
import { serverStream, startGrpcServer, writeWithBackpressure, type GrpcServerHandle } from "@mkt/runtime/grpc-server";
import { createLogger } from "@mkt/runtime/logger";
import {
  BillingServiceClient,
  BillingServiceService,
  ExportUsageRequest,
  type ExportUsageResponse,
  type UsageExportRow,
} from "@mkt/proto/billing/v1/billing";
import { installErrorHandler } from "../src/plugins/error-handler.ts";
import { openUsageExport, sendUsageCsv } from "../src/usage/export-csv.ts";

/**
 * The edge's half of the export against a real gRPC server standing in for billing: it streams
 * `days` pages of ROWS_PER_PAGE rows through writeWithBackpressure, as billing does, and records
 * how far it got. Requests name their scenario in `accountId`.
 */
const ROWS_PER_PAGE = 100;
const MODEL = `model-${"x".repeat(200)}`; // long rows, so pages outgrow the socket buffers sooner

interface Export {
  written: number;
  cancelled: boolean;
  done: Promise<void>;
}
const exports: Export[] = [];

function row(n: number): UsageExportRow {
  return {
    timestamp: new Date(Date.UTC(2026, 10, 1) + n * 1000).toISOString(),
    modelId: MODEL,
    provider: "local",
    inputTokens: BigInt(n),
    outputTokens: 2n,
    costMicros: BigInt(n * 10 + 1),
    latencyMs: 5n,
    success: n % 2 === 0,
    cachedTokens: BigInt(Math.floor(n / 2)),
  };
}

async function exportUsage(call: ServerWritableStream<ExportUsageRequest, ExportUsageResponse>): Promise<void> {
  const scenario = call.request.accountId;
  if (scenario === "refused") throw new AppError("not_found", "No such account.");
  let finished!: () => void;
  const state: Export = { written: 0, cancelled: false, done: new Promise((r) => (finished = r)) };
  exports.push(state);
  try {
    if (scenario === "odd-rows") {
      const odd = { ...row(0), modelId: '=SUM(1,2) "née" 模型', costMicros: 12_345_678n };
      const empty = {
        ...row(1),
        modelId: "",
        provider: "",
        inputTokens: 0n,
        outputTokens: 0n,
        costMicros: 0n,
        cachedTokens: 0n,
      };
      await writeWithBackpressure(call, { rows: [odd, { ...empty, latencyMs: 0n, success: false }] });
      return;
    }
    for (let page = 0; page < call.request.days; page++) {
      if (scenario === "fails-later" && page === 3) throw new Error("database went away");
      const rows = Array.from({ length: ROWS_PER_PAGE }, (_, i) => row(page * ROWS_PER_PAGE + i));
      if (!(await writeWithBackpressure(call, { rows }))) {
        state.cancelled = true;
        return;
      }
      state.written++;
    }
  } finally {
    finished();
  }
}

let billing: GrpcServerHandle;
let client: BillingServiceClient;
let app: FastifyInstance;
let base: string;

beforeAll(async () => {
  const log = createLogger("export-csv-test", "silent");
  const certs = await testCertificates();
  billing = await startGrpcServer(
    "127.0.0.1",
    0,
    [[BillingServiceService, { exportUsage: serverStream(log, "ExportUsage", exportUsage) }, BILLING_CALLERS]],
    { tls: certs.tls("billing"), log },
  );
  client = createClient(BillingServiceClient, `127.0.0.1:${billing.port}`, certs.tls("edge"));
  app = Fastify();
  installErrorHandler(app);
  app.get<{ Querystring: { pages: string; scenario?: string } }>("/export", async (request, reply) => {
    const { pages, scenario = "plain" } = request.query;
    const call = openUsageExport(client, ExportUsageRequest.fromPartial({ accountId: scenario, days: Number(pages) }));
    return sendUsageCsv(call, reply, "usage.csv");
  });
  base = await app.listen({ host: "127.0.0.1", port: 0 });
});

afterAll(async () => {
  await app?.close();
  client?.close();
  await billing?.close(1_000);
});

/** Reads `res` until at least `bytes` have arrived, then stops, leaving the rest unread. */
async function readAtLeast(res: Response, bytes: number): Promise<ReadableStreamDefaultReader<Uint8Array>> {
  const reader = res.body!.getReader();
  for (let got = 0; got < bytes;) {
    const { value, done } = await reader.read();
    if (done) throw new Error("the export ended early");
    got += value.byteLength;
  }
  return reader;
}

async function until(condition: () => boolean, timeoutMs = 5_000): Promise<void> {
  for (const deadline = Date.now() + timeoutMs; !condition();) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("the usage export's CSV stream", () => {
  it("turns every page into CSV rows, in order, with the spec's header", async () => {
    const res = await fetch(`${base}/export?pages=30`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/csv; charset=utf-8");
    const lines = (await res.text()).split("\n");
    expect(lines.at(-1)).toBe(""); // every record ends with \n
    expect(lines[0]).toBe(
      "timestamp,model,provider,input_tokens,output_tokens,total_tokens,cost_usd,latency_ms,success,cached_tokens",
    );
    expect(lines).toHaveLength(30 * ROWS_PER_PAGE + 2);
    expect(lines[1]).toBe(`2026-11-01T00:00:00.000Z,${MODEL},local,0,2,2,0.000001,5,true,0`);
    expect(lines.at(-2)).toBe(`2026-11-01T00:49:59.000Z,${MODEL},local,2999,2,3001,0.029991,5,false,1499`);
  });

  it("answers an empty export with the header only", async () => {
    const res = await fetch(`${base}/export?pages=0`);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(
      "timestamp,model,provider,input_tokens,output_tokens,total_tokens,cost_usd,latency_ms,success,cached_tokens\n",
    );
  });

  it("quotes and defuses text, keeps non-ASCII text, and writes empty and zero fields", async () => {
    const res = await fetch(`${base}/export?pages=1&scenario=odd-rows`);
    expect((await res.text()).split("\n").slice(1)).toEqual([
      `2026-11-01T00:00:00.000Z,"'=SUM(1,2) ""née"" 模型",local,0,2,2,12.345678,5,true,0`,
      "2026-11-01T00:00:01.000Z,,,0,0,0,0.000000,0,false,0",
      "",
    ]);
  });

  it("holds billing back while the client does not read, and finishes when it does", async () => {
    const pages = 2_000; // ~49 MB of CSV, far more than every buffer on the way holds
    const res = await fetch(`${base}/export?pages=${pages}`);
    const reader = res.body!.getReader();
    let lines = 0;
    const count = (chunk: Uint8Array) => {
      for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
    };
    count((await reader.read()).value!);
    const state = exports.at(-1)!;
    // Let every buffer between billing and this reader fill up, then look at billing's progress.
    let seen = -1;
    while (seen !== state.written) {
      seen = state.written;
      await new Promise((r) => setTimeout(r, 300));
    }
    expect(state.written).toBeLessThan(pages / 2);

    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) count(chunk.value);
    expect(lines).toBe(1 + pages * ROWS_PER_PAGE);
    await state.done;
    expect(state).toMatchObject({ written: pages, cancelled: false });
  });

  it("cancels billing's stream when the client goes away", async () => {
    const aborter = new AbortController();
    const res = await fetch(`${base}/export?pages=2000`, { signal: aborter.signal });
    await readAtLeast(res, 100_000);
    const state = exports.at(-1)!;
    aborter.abort();
    await until(() => state.cancelled);
    expect(state.written).toBeLessThan(2_000);
  });

  it("answers a failure before the first page as an ordinary HTTP error", async () => {
    const res = await fetch(`${base}/export?pages=5&scenario=refused`);
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("not_found");
  });

  it("cuts the response on a later failure, so the client sees an error, not a short file", async () => {
    const res = await fetch(`${base}/export?pages=5&scenario=fails-later`);
    expect(res.status).toBe(200);
    await expect(res.text()).rejects.toThrow();
  });
});
