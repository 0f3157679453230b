import { randomUUID } from "node:crypto";
import { Registry } from "prom-client";
import type { Route, RouteScope } from "@mkt/proto/registry/v1/registry";
import { AppError } from "@mkt/runtime/errors";
import { eventNames } from "@mkt/runtime/nats";
import { connectNats } from "@mkt/runtime/nats";
import { loadEdgeConfig } from "../../src/config.ts";
import { relayAnswer } from "../../src/relay/relay-answer.ts";
import type { RelayRequest } from "../../src/relay/relay-request.ts";
import { edgeOutliers, startRelay } from "../../src/relay/relay-setup.ts";
import { watchCatalog } from "../../src/routing/catalog-watch.ts";
import { RoutingTable } from "../../src/routing/routing-table.ts";
import { startHarness as startRegistryHarness, waitFor } from "../../../services/registry/test/registry-harness.ts";

export { CONTENT, UPSTREAM_TOKEN, TEST_MODELS, waitFor } from "../../../services/registry/test/registry-harness.ts";

/** One event of a relayed answer as a test reads it (a batch of chunks is split into its chunks). */
export interface HarnessEvent {
  chunk?: string;
  completion?: string;
  error?: { code: string; message: string };
}

/** How a chat ended, as `chat` reports it. */
export interface ChatResult {
  events: HarnessEvent[];
  /** Writes the relay asked for (a batch of chunks is one, the end too). */
  messages: number;
  /** The answer ended whole (its usage durable before its last bytes). */
  whole: boolean;
  /** The failure before the first event (an HTTP error at the edge). */
  error?: AppError;
  cancelled?: boolean;
}

/**
 * The relay as the edge runs it, against a real registry: registry (the control plane, with the
 * fake upstream as its local model server, accounts as a double) streams its routing table to an
 * in-process RoutingTable, and `chat` relays a request through relayAnswer with the edge's own
 * pools, outlier ejection and group-committed usage publisher on the test's NATS. `env` is read by
 * both registry's and the edge's configuration loaders (each takes its own variables).
 */
export async function startRelayHarness(env: Record<string, string> = {}, options: { natsUrl?: string } = {}) {
  const base = await startRegistryHarness(env, options);
  const config = loadEdgeConfig({
    ADMIN_TOKEN: "mk_admin_relay_harness_0123456789abcdef",
    // The relay calls no service: its certificates do not matter here.
    TLS_MODE: "off",
    ALLOW_PRIVATE_UPSTREAMS: "true",
    UPSTREAM_FIRST_BYTE_TIMEOUT_MS: "1500",
    UPSTREAM_IDLE_TIMEOUT_MS: "1500",
    EVENTS_PREFIX: base.config.EVENTS_PREFIX,
    ...env,
  });
  const natsUrl = options.natsUrl ?? base.config.NATS_URL;
  const nc = await connectNats(natsUrl, "relay-harness", base.log);
  const outliers = edgeOutliers(config);
  const table = new RoutingTable(outliers);
  const stopWatch = watchCatalog(base.edgeClient, table, base.log);
  await table.ready(10_000);
  const metrics = new Registry();
  const relay = startRelay(config, {
    nc,
    subject: eventNames(base.config.EVENTS_PREFIX).usageCompleted,
    upstreams: table,
    outliers,
    metrics,
    log: base.log,
  });

  /** What the edge's table answers for `name` now: the route, or the refusal it throws. */
  function resolveNow(name: string, scope?: RouteScope): Route | AppError {
    try {
      return table.resolve(name, scope);
    } catch (err) {
      if (err instanceof AppError) return err;
      throw err;
    }
  }

  /** The route the edge's table resolves `name` to, once the table knows it (a change takes a moment to arrive). */
  async function route(name: string, scope?: RouteScope): Promise<Route> {
    const found = await waitFor(
      () => resolveNow(name, scope),
      (r) => !(r instanceof AppError && r.code === "model_not_found"),
      5_000,
    );
    if (found instanceof AppError) throw found;
    return found;
  }

  /** The error the edge's table refuses `name` with now; fails when the name resolves. */
  function refusal(name: string, scope?: RouteScope): AppError {
    const found = resolveNow(name, scope);
    if (!(found instanceof AppError)) throw new Error(`\`${name}\` resolved to ${found.provider} ${found.modelId}`);
    return found;
  }

  return {
    ...base,
    table,
    relay,
    metrics,
    resolveNow,
    route,
    refusal,
    /** A request as the edge admits it: a fresh id and lease, the route from the table. */
    async chatRequest(
      modelName: string,
      overrides: Partial<RelayRequest> = {},
      body: object = {},
    ): Promise<RelayRequest> {
      return {
        requestId: `req_${randomUUID()}`,
        accountId: randomUUID(),
        keyId: "key_1",
        route: overrides.route ?? (await route(modelName)),
        fallbackRoutes: [],
        body: Buffer.from(
          JSON.stringify({ model: modelName, messages: [{ role: "user", content: "Say hello" }], ...body }),
        ),
        stream: true,
        includeUsage: false,
        maxOutputTokens: 100n,
        promptTokens: 20n,
        receivedAtMs: BigInt(Date.now() - 5),
        choices: 0n,
        leaseId: randomUUID(),
        worstCaseMicros: 0n,
        worstCaseTokens: 0n,
        subscriptionId: "",
        includedTokens: 0n,
        ...overrides,
      };
    },
    /**
     * Relays a request to its end as the edge's route does. `cancelAfter` makes the client leave
     * after that many events; `clientGoneAtEnd` makes it leave between the answer's last chunk and
     * its end (its connection closed when the relay checks); `cut` is the edge's own end of its
     * answers (its shutdown grace over).
     */
    async chat(
      request: RelayRequest,
      cancelAfter?: number,
      { clientGoneAtEnd = false, cut }: { clientGoneAtEnd?: boolean; cut?: AbortSignal } = {},
    ): Promise<ChatResult> {
      const gone = new AbortController();
      const events: HarnessEvent[] = [];
      let messages = 0;
      let whole = false;
      let cancelled = false;
      const answer = relayAnswer(relay.deps, request, {
        clientGone: gone.signal,
        clientConnected: () => !clientGoneAtEnd,
        ...(cut ? { cut } : {}),
      });
      try {
        for await (const event of answer) {
          messages++;
          if ("end" in event) {
            whole = true;
            continue;
          }
          if ("chunks" in event) events.push(...event.chunks.map((chunk) => ({ chunk })));
          else if ("completion" in event) {
            events.push({ completion: event.completion });
            whole = true;
          } else events.push({ error: { code: event.error.code, message: event.error.message } });
          if (cancelAfter !== undefined && events.length >= cancelAfter) {
            gone.abort();
            cancelled = true;
            break;
          }
        }
      } catch (err) {
        return { events, messages, whole, error: err as AppError };
      }
      return { events, messages, whole, ...(cancelled ? { cancelled } : {}) };
    },
    async close() {
      stopWatch();
      await relay.close();
      await nc.drain();
      await base.close();
    },
  };
}

export type RelayHarness = Awaited<ReturnType<typeof startRelayHarness>>;

/** Decodes the JSON of a chunk or completion event. */
export function eventJson(event: HarnessEvent): Record<string, unknown> {
  const text = event.chunk ?? event.completion;
  if (!text) throw new Error("event carries no JSON");
  return JSON.parse(text) as Record<string, unknown>;
}
