import { createServer, type IncomingMessage, type Server } from "node:http";
import { decodeUsageEvent, usageItems } from "@mkt/runtime/usage-messages";
import type { AddressInfo, Socket } from "node:net";
import { Writable } from "node:stream";
import { randomBytes } from "node:crypto";
import { pino } from "pino";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { createClient } from "@mkt/runtime/grpc-client";
import { ensureUsageStream, eventNames } from "@mkt/runtime/nats";
import { REDACTED_PATHS } from "@mkt/runtime/logger";
import { freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { allowedCallerClient, testCertificates } from "@mkt/testkit/test-certificates";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { CatalogChanged } from "@mkt/proto/events/v1/events";
import {
  RegistryServiceClient,
  type ArchiveProductRequest,
  type ArchiveProductResponse,
  type CreateProductRequest,
  type CreateProductResponse,
  type GetHosterRequest,
  type GetHosterResponse,
  type GetProductRequest,
  type GetProductResponse,
  type ListEndpointsRequest,
  type ListEndpointsResponse,
  type ListHostersResponse,
  type ListModelsResponse,
  type ListProductsRequest,
  type ListProductsResponse,
  type ListUsageDeadLettersResponse,
  type RegisterHosterRequest,
  type RegisterHosterResponse,
  type ReplayUsageDeadLettersRequest,
  type ReplayUsageDeadLettersResponse,
  type UpdateProductRequest,
  type UpdateProductResponse,
} from "@mkt/proto/registry/v1/registry";
import { loadRegistryConfig } from "../src/config.ts";
import { startRegistry } from "../src/server.ts";
import { REGISTRY_CALLERS } from "../src/registry-callers.ts";
import { startAccountsDouble } from "./accounts-double.ts";

export const UPSTREAM_TOKEN = "sk-upstream-SECRET-7f3a9c";
export const CONTENT = ["Hello", " there", ", friend", "!"];

/** What the fake upstream received, per call. */
export interface UpstreamCall {
  authorization: string | undefined;
  body: Record<string, unknown>;
  /** The client port of the TCP connection the request came on (same port = connection reused). */
  remotePort: number | undefined;
  /** Resolves when the upstream saw its connection closed before it finished answering. */
  aborted: Promise<void>;
}

/**
 * A small real OpenAI-compatible SSE server. Its behaviour is picked by the model name it is
 * asked for (the catalog's upstream_model), so one server plays every upstream the tests need.
 */
export async function startFakeUpstream() {
  const calls: UpstreamCall[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer(async (req, res) => {
    const body = JSON.parse((await readAll(req)) || "{}") as Record<string, unknown>;
    let markAborted!: () => void;
    const aborted = new Promise<void>((resolve) => (markAborted = resolve));
    res.on("close", () => {
      if (!res.writableFinished) markAborted();
    });
    calls.push({ authorization: req.headers.authorization, body, remotePort: req.socket.remotePort, aborted });
    if (req.headers.authorization !== `Bearer ${UPSTREAM_TOKEN}`) {
      res.writeHead(401, { "content-type": "application/json" }).end('{"error":{"message":"bad token"}}');
      return;
    }
    const mode = String(body.model);
    if (mode === "fail500") {
      res
        .writeHead(500, { "content-type": "application/json" })
        .end(`{"error":{"message":"internal upstream detail: token ${UPSTREAM_TOKEN}"}}`);
      return;
    }
    if (mode === "hang") return; // never answers: headers never come
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    const send = (chunk: unknown) => res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    const base = { id: "chatcmpl-up1", object: "chat.completion.chunk", created: 1_700_000_000, model: mode };
    const delta = (d: Record<string, unknown>, finish: string | null = null) =>
      send({ ...base, choices: [{ index: 0, delta: d, finish_reason: finish }] });

    if (mode === "stall") {
      delta({ role: "assistant", content: "" });
      delta({ content: CONTENT[0] });
      return; // then silence: idle timeout or caller cancel
    }
    if (mode === "tools") {
      delta({
        role: "assistant",
        content: null,
        tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "get_weather", arguments: "" } }],
      });
      delta({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] });
      delta({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] });
      delta({}, "tool_calls");
      send({ ...base, choices: [], usage: { prompt_tokens: 30, completion_tokens: 9, total_tokens: 39 } });
      res.end("data: [DONE]\n\n");
      return;
    }
    delta({ role: "assistant", content: "" });
    for (const piece of CONTENT) delta({ content: piece });
    // Some servers put usage on the finishing chunk: it must be stripped before relaying.
    send({
      ...base,
      choices: [{ index: 0, delta: {}, finish_reason: "stop" }],
      usage: { prompt_tokens: 999, completion_tokens: 999 },
    });
    const usage: Record<string, Record<string, unknown>> = {
      ok: { prompt_tokens: 12, completion_tokens: 5 },
      "liar-huge": { prompt_tokens: 1e12, completion_tokens: 1e12 },
      "liar-negative": { prompt_tokens: -40, completion_tokens: -3 },
      "liar-garbage": { prompt_tokens: "12", completion_tokens: null },
      "liar-float": { prompt_tokens: Number.MAX_VALUE, completion_tokens: Number.POSITIVE_INFINITY },
      // More cached prompt tokens than prompt tokens, and more reasoning than output.
      "liar-cached": {
        prompt_tokens: 12,
        completion_tokens: 5,
        prompt_tokens_details: { cached_tokens: 1e9 },
        completion_tokens_details: { reasoning_tokens: 1e9 },
      },
    };
    send({ ...base, choices: [], usage: usage[mode] ?? usage.ok });
    res.end("data: [DONE]\n\n");
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

async function readAll(req: IncomingMessage): Promise<string> {
  const parts: Buffer[] = [];
  for await (const part of req) parts.push(part as Buffer);
  return Buffer.concat(parts).toString("utf8");
}

const model = (id: string, upstream: string, alias = "") => ({
  model_id: id,
  model_alias: alias || undefined,
  context_window: 8192,
  input_price_per_1m_usd: "0.50",
  output_price_per_1m_usd: 1.5,
  upstream_model: upstream,
});

export const TEST_MODELS = [
  model("demo-small", "ok", "Demo Small"),
  model("broken", "fail500"),
  model("hanging", "hang"),
  model("stalling", "stall"),
  model("tooling", "tools"),
  model("liar-huge", "liar-huge"),
  model("liar-negative", "liar-negative"),
  model("liar-garbage", "liar-garbage"),
  model("liar-float", "liar-float"),
  model("liar-cached", "liar-cached"),
];

/**
 * Everything a registry test file needs: fake upstream, accounts double, registry, NATS reader
 * (the edge's relay harness, edge/test/relay/relay-harness.ts, adds the relay on top).
 * `natsUrl` points registry and the reader at another NATS (a test's private nats-server); `clock`
 * is registry's hosters' clock (checks and live figures' windows).
 */
export async function startHarness(
  env: Record<string, string> = {},
  { natsUrl = TEST_NATS_URL, clock }: { natsUrl?: string; clock?: () => Date } = {},
) {
  const logLines: string[] = [];
  const sink = new Writable({
    write(line, _enc, done) {
      logLines.push(String(line));
      done();
    },
  });
  // Debug level and the process's redaction rules: tests check that no line carries the token.
  const log = pino({ level: "debug", redact: { paths: REDACTED_PATHS, censor: "[redacted]" } }, sink);
  const upstream = await startFakeUpstream();
  const accounts = await startAccountsDouble(log);
  const databaseUrl = await freshDatabaseUrl();
  const secretsKey = randomBytes(32).toString("hex");
  const prefix = freshEventsPrefix();
  const names = eventNames(prefix);
  const certs = await testCertificates();
  const config = loadRegistryConfig({
    ...certs.env("registry"),
    DATABASE_URL: databaseUrl,
    SECRETS_KEY: secretsKey,
    ACCOUNTS_ADDR: `127.0.0.1:${accounts.port}`,
    // Test hoster servers listen on loopback.
    ALLOW_PRIVATE_UPSTREAMS: "true",
    NATS_URL: natsUrl,
    EVENTS_PREFIX: prefix,
    GRPC_PORT: "0",
    METRICS_PORT: "0",
    LOCAL_MODEL_URL: upstream.url,
    LOCAL_MODEL_TOKEN: UPSTREAM_TOKEN,
    LOCAL_MODELS: JSON.stringify(TEST_MODELS),
    UPSTREAM_FIRST_BYTE_TIMEOUT_MS: "1500",
    UPSTREAM_IDLE_TIMEOUT_MS: "1500",
    ...env,
  });
  // Reconnects forever, as the services do: fault tests stop and restart their NATS under it.
  const nc: NatsConnection = await connect({ servers: natsUrl, maxReconnectAttempts: -1, reconnectTimeWait: 250 });
  // Billing owns the usage stream and registry only waits for it: the harness plays billing.
  await ensureUsageStream(nc, names);
  const registry = await startRegistry(config, log, { clock });
  // The routing table is streamed to edges only, so this client holds the edge's certificate.
  const grpcClient = createClient(RegistryServiceClient, `127.0.0.1:${registry.port}`, certs.tls("edge"));
  const callers = allowedCallerClient(RegistryServiceClient, `127.0.0.1:${registry.port}`, REGISTRY_CALLERS, certs);
  const client = callers.client as unknown as {
    listModels(request: object): Promise<ListModelsResponse>;
    registerHoster(request: RegisterHosterRequest): Promise<RegisterHosterResponse>;
    getHoster(request: GetHosterRequest): Promise<GetHosterResponse>;
    listHosters(request: object): Promise<ListHostersResponse>;
    listEndpoints(request: ListEndpointsRequest): Promise<ListEndpointsResponse>;
    createProduct(request: CreateProductRequest): Promise<CreateProductResponse>;
    listProducts(request: ListProductsRequest): Promise<ListProductsResponse>;
    getProduct(request: GetProductRequest): Promise<GetProductResponse>;
    updateProduct(request: UpdateProductRequest): Promise<UpdateProductResponse>;
    archiveProduct(request: ArchiveProductRequest): Promise<ArchiveProductResponse>;
    listUsageDeadLetters(request: object): Promise<ListUsageDeadLettersResponse>;
    replayUsageDeadLetters(request: ReplayUsageDeadLettersRequest): Promise<ReplayUsageDeadLettersResponse>;
  };
  const jsm: JetStreamManager = await jetstreamManager(nc);
  // Every publish, duplicates included (JetStream would hide a duplicate msgID from the stream).
  const published: UsageCompleted[] = [];
  const sub: Subscription = nc.subscribe(names.usageCompleted);
  void (async () => {
    // Each message a batch of events (or one bare event), as the edge publishes them.
    for await (const msg of sub) {
      published.push(...decodableEvents(msg.data, msg.headers));
    }
  })();
  // The hoster ids of every catalog.changed announcement, in order.
  const catalogChanges: string[] = [];
  void (async () => {
    for await (const msg of nc.subscribe(names.catalogChanged))
      catalogChanges.push(CatalogChanged.decode(msg.data).hosterId);
  })();
  await nc.flush();

  return {
    upstream,
    accounts,
    /** The registry's configuration and logger, to start another registry on the same state. */
    config,
    log,
    databaseUrl,
    secretsKey,
    registry,
    client,
    /** A client with the edge's certificate (WatchCatalog's one caller). */
    edgeClient: grpcClient,
    logLines,
    published,
    catalogChanges,
    /** The usage.completed events JetStream holds for a request. */
    async storedEvents(requestId: string): Promise<UsageCompleted[]> {
      // A request made while the connection is down is lost (a fault test's NATS restarting).
      await waitFor(
        () =>
          nc.rtt().then(
            () => true,
            () => false,
          ),
        (connected) => connected,
      );
      const info = await jsm.streams.info(names.usageStream);
      const found: UsageCompleted[] = [];
      for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
        const msg = await jsm.streams.getMessage(names.usageStream, { seq }).catch(() => null);
        if (!msg) continue;
        found.push(...decodableEvents(msg.data, msg.header).filter((event) => event.requestId === requestId));
      }
      return found;
    },
    async close() {
      grpcClient.close();
      callers.close();
      await registry.close(1_000);
      await accounts.close(1_000);
      await upstream.close();
      sub.unsubscribe();
      await jsm.streams.delete(names.usageStream).catch(() => undefined);
      await nc.drain();
    },
  };
}

export type Harness = Awaited<ReturnType<typeof startHarness>>;

/** Polls until `read` returns a value `done` accepts. */
export async function waitFor<T>(read: () => Promise<T> | T, done: (v: T) => boolean, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * The events of a published message that decode: the dead-letter tests publish undecodable ones on
 * purpose, and the record of what was published leaves those out instead of failing the run.
 */
function decodableEvents(data: Uint8Array, headers: Parameters<typeof usageItems>[1]): UsageCompleted[] {
  const events: UsageCompleted[] = [];
  let items: ReturnType<typeof usageItems>;
  try {
    items = usageItems(data, headers);
  } catch {
    return events;
  }
  for (const item of items) {
    try {
      events.push(decodeUsageEvent(item.data));
    } catch {
      // not an event: left out
    }
  }
  return events;
}
