/**
 * One chat request is one trace: the whole system runs as real processes (bench/gateway/system.ts,
 * the launcher's NODE_OPTIONS with the tracing hook) exporting OTLP http/json to a receiver here,
 * and the spans it gets must join the edge's HTTP server span, the edge's upstream call (the relay
 * is in the edge) and billing's settlement (through the NATS message's `traceparent`) in one tree.
 */
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, expect, it } from "vitest";
import { freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { System } from "../../bench/gateway/system.ts";
import { OtlpReceiver, type ReceivedSpan } from "./otlp-receiver.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const SERVER = 2;
const CLIENT = 3;
const PRODUCER = 4;
const CONSUMER = 5;

const receiver = new OtlpReceiver();
const logDir = mkdtempSync(join(tmpdir(), "mkt-tracing-"));
let system: System;
let crashed = "";

beforeAll(async () => {
  const endpoint = await receiver.start();
  system = new System({
    root,
    logDir,
    databaseUrl: await freshDatabaseUrl(),
    natsUrl: TEST_NATS_URL,
    eventsPrefix: freshEventsPrefix(),
    model: "demo-small",
    // debug: billing's "usage settled" line is written inside the settlement's span.
    logLevel: "debug",
    env: {
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_BSP_SCHEDULE_DELAY: "100",
    },
    onCrash: (what, tail) => (crashed += `${what}\n${tail}\n`),
  });
  await system.startModel({ completionTokens: 5, tokensPerSecond: 1000 });
  await system.startServices();
}, 120_000);

afterAll(async () => {
  await system?.stop();
  await receiver.stop();
});

async function waitFor<T>(what: string, find: () => T | undefined, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = find();
    if (found !== undefined) return found;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${crashed ? `\n${crashed}` : ""}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

it("follows one chat request from the edge through the upstream to billing's settlement", async () => {
  const [account] = await system.createAccounts(1, 1);
  const res = await fetch(`${system.edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${account!.apiKey}` },
    body: JSON.stringify({ model: "demo-small", messages: [{ role: "user", content: "hello" }], max_tokens: 8 }),
  });
  expect(res.status).toBe(200);
  await res.json();
  expect(res.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
  const [, traceId, edgeSpanId] = res.headers.get("traceresponse")!.match(/^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/)!;

  const inTrace = () => receiver.spans.filter((s) => s.traceId === traceId);
  const byId = (id: string) => inTrace().find((s) => s.spanId === id);
  const ancestors = (span: ReceivedSpan): ReceivedSpan[] => {
    const parent = byId(span.parentSpanId);
    return parent ? [parent, ...ancestors(parent)] : [];
  };
  const settle = await waitFor("billing's settle span", () =>
    inTrace().find((s) => s.service === "billing" && s.kind === CONSUMER),
  );

  // The edge's HTTP server span is the root, named after the route, and the one the header names.
  // Each process exports its spans in its own batches: the edge's may come after billing's.
  const edge = await waitFor("the edge's server span", () => byId(edgeSpanId!));
  expect(edge).toMatchObject({ service: "edge", kind: SERVER, parentSpanId: "", name: "POST /v1/chat/completions" });

  // edge → upstream: undici's client span under the edge's server span, and the upstream's own
  // server span under it (hoster-server runs with the same hook). The relay is in the edge: no
  // registry span takes part in the answer.
  const upstreamCall = await waitFor("the upstream call", () =>
    inTrace().find(
      (s) => s.service === "edge" && s.kind === CLIENT && ancestors(s).includes(edge) && /POST/.test(s.name),
    ),
  );
  const upstreamServer = await waitFor("the upstream's server span", () =>
    inTrace().find((s) => s.service === "hoster-server" && s.kind === SERVER),
  );
  expect(upstreamServer.parentSpanId, JSON.stringify(inTrace(), null, 1)).toBe(upstreamCall.spanId);
  expect(inTrace().filter((s) => s.service === "registry" && s.kind === SERVER)).toEqual([]);

  // edge → NATS → billing: the settle span is the child of the edge's publish span.
  const publish = byId(settle.parentSpanId)!;
  expect(publish).toMatchObject({ service: "edge", kind: PRODUCER });
  expect(ancestors(publish)).toContain(edge);
  // The batch's database work is in the same trace, under the settle span.
  const batch = await waitFor("the settle batch span", () =>
    inTrace().find((s) => s.service === "billing" && s.parentSpanId === settle.spanId),
  );
  await waitFor("a query of the settlement", () =>
    inTrace().find((s) => s.service === "billing" && s.kind === CLIENT && ancestors(s).includes(batch)),
  );

  // The trace id is in the log lines written inside the trace.
  const billingLog = readFileSync(join(logDir, "billing.log"), "utf8").split("\n").filter(Boolean);
  expect(billingLog.some((line) => (JSON.parse(line) as { trace_id?: string }).trace_id === traceId)).toBe(true);
  expect(receiver.rejected).toEqual([]);
});

it("walks a warm chat request through the edge alone: the upstream call and the usage publish, no gRPC call", async () => {
  const [account] = await system.createAccounts(1, 1);
  const ask = async () => {
    const res = await fetch(`${system.edgeUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${account!.apiKey}` },
      body: JSON.stringify({ model: "demo-small", messages: [{ role: "user", content: "hi" }], max_tokens: 4 }),
    });
    expect(res.status).toBe(200);
    await res.json();
    return res.headers.get("traceresponse")!.match(/^00-([0-9a-f]{32})-/)![1]!;
  };
  // The first request is cold: it authenticates with accounts and takes a lease from billing
  // (which the same look at its trace sees).
  const coldId = await ask();
  await waitFor("the cold request's GrantLease at billing", () =>
    receiver.spans.find((s) => s.traceId === coldId && s.service === "billing" && s.kind === SERVER),
  );
  const traceId = await ask();
  const inTrace = () => receiver.spans.filter((s) => s.traceId === traceId);
  await waitFor("billing's settle span of the warm request", () =>
    inTrace().find((s) => s.service === "billing" && s.kind === CONSUMER),
  );
  await waitFor("the warm request's upstream call", () =>
    inTrace().find((s) => s.service === "edge" && s.kind === CLIENT && /POST/.test(s.name)),
  );
  // The edge's spans of the request: its server span, the upstream call and the publish; no
  // client span to a service of ours (accounts, billing, registry are gRPC).
  const edgeClients = inTrace().filter((s) => s.service === "edge" && s.kind === CLIENT);
  expect(edgeClients.map((s) => s.name).filter((name) => /grpc|marketplace\./i.test(name))).toEqual([]);
  expect(inTrace().filter((s) => ["accounts", "registry"].includes(s.service))).toEqual([]);
  expect(inTrace().filter((s) => s.service === "billing" && s.kind === SERVER)).toEqual([]);
});
