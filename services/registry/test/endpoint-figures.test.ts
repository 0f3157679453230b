import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { eventNames } from "@mkt/runtime/nats";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { HosterModel } from "@mkt/proto/registry/v1/registry";
import {
  figuresOf,
  minutesOf,
  MS_BUCKETS,
  outcomeOf,
  percentile,
  TPS_BUCKETS,
} from "../src/hosters/endpoint-figures.ts";
import { startHarness, waitFor, type Harness } from "./registry-harness.ts";
import { startRealHoster } from "./hoster-servers.ts";

const event = (e: Partial<UsageCompleted>) =>
  UsageCompleted.fromPartial({ requestId: `req_${randomUUID()}`, provider: "hoster", modelId: "m", ...e });

describe("an answer's outcome for its hoster", () => {
  it("counts a 5xx, a timeout and a broken stream as faults, the upstream's 429 apart, a client's error as neither", () => {
    expect(outcomeOf(event({ success: true, upstreamStatus: 200 }))).toBe("success");
    expect(outcomeOf(event({ errorCode: "upstream_error", upstreamStatus: 500 }))).toBe("fault");
    expect(outcomeOf(event({ errorCode: "upstream_timeout", upstreamStatus: 0 }))).toBe("fault");
    // A stream that broke after a 200.
    expect(outcomeOf(event({ errorCode: "upstream_error", upstreamStatus: 200 }))).toBe("fault");
    expect(outcomeOf(event({ errorCode: "rate_limit_exceeded", upstreamStatus: 429 }))).toBe("upstream_429");
    expect(outcomeOf(event({ errorCode: "invalid_request", upstreamStatus: 400 }))).toBe("other");
    expect(outcomeOf(event({ errorCode: "client_cancelled", upstreamStatus: 200 }))).toBe("other");
  });
});

describe("per-minute histograms", () => {
  it("groups a batch by endpoint and minute, and puts each success's latency, TTFT and speed in its bucket", () => {
    const hosterId = randomUUID();
    const at = "2030-01-07T12:00:30.000Z";
    const minutes = minutesOf(
      [
        event({ hosterId, success: true, latencyMs: 900n, timeToFirstTokenMs: 250n, outputTokens: 66n, startedAt: at }),
        event({ hosterId, success: true, latencyMs: 90n, timeToFirstTokenMs: 40n, outputTokens: 1n, startedAt: at }),
        event({ hosterId, errorCode: "upstream_error", upstreamStatus: 502, latencyMs: 5n, startedAt: at }),
        event({ hosterId, startedAt: "2030-01-07T12:01:00.000Z", success: true, latencyMs: 10n }),
        // Not a hoster's answer, or garbled ids: no endpoint (a row of them would fail the batch).
        event({ hosterId: "", provider: "local", success: true }),
        event({ hosterId: "not-a-uuid", success: true }),
        event({ hosterId, modelId: "bad\u0000id", success: true }),
      ],
      new Date(),
    );
    expect(minutes).toHaveLength(2);
    const [first, second] = minutes;
    expect(first).toMatchObject({ hosterId, modelId: "m", requests: 3, successes: 2, faults: 1, upstream429s: 0 });
    expect(first!.minute.toISOString()).toBe("2030-01-07T12:00:00.000Z");
    // 900 ms → the 1,000 bucket; 90 → 100. A fault's latency is not a latency sample.
    expect(first!.latencyHist[MS_BUCKETS.indexOf(1_000)]).toBe(1);
    expect(first!.latencyHist[MS_BUCKETS.indexOf(100)]).toBe(1);
    expect(first!.latencyHist.reduce((a, b) => a + b)).toBe(2);
    // 65 tokens after the first in 650 ms: 100 tokens/s; a one-token answer says nothing of speed.
    expect(first!.tpsHist[TPS_BUCKETS.indexOf(100)]).toBe(1);
    expect(first!.tpsHist.reduce((a, b) => a + b)).toBe(1);
    expect(second).toMatchObject({ requests: 1, successes: 1 });
  });

  it("reads percentiles as bucket bounds, and uptime as successes over successes and faults", () => {
    const hist = MS_BUCKETS.map(() => 0);
    hist[MS_BUCKETS.indexOf(100)] = 5;
    hist[MS_BUCKETS.indexOf(500)] = 4;
    hist[MS_BUCKETS.length - 1] = 1; // beyond 120 s
    expect(percentile(hist, MS_BUCKETS, 0.5)).toBe(100);
    expect(percentile(hist, MS_BUCKETS, 0.9)).toBe(500);
    expect(percentile(hist, MS_BUCKETS, 1)).toBe(120_000);
    expect(
      percentile(
        MS_BUCKETS.map(() => 0),
        MS_BUCKETS,
        0.5,
      ),
    ).toBeUndefined();
    const none = { latencyHist: [], ttftHist: [], tpsHist: [] };
    expect(figuresOf({ requests: 10, successes: 7, faults: 3, upstream429s: 0, ...none }).uptime).toBeCloseTo(0.7);
    expect(figuresOf({ requests: 2, successes: 0, faults: 0, upstream429s: 2, ...none }).uptime).toBeUndefined();
  });
});

describe("live figures through registry (usage.completed → endpoint_minutes → the hoster views)", () => {
  let h: Harness;
  let nc: NatsConnection;
  let now = new Date();
  const servers: Array<{ close(): Promise<void> }> = [];

  beforeAll(async () => {
    h = await startHarness({}, { clock: () => now });
    nc = await connect({ servers: TEST_NATS_URL });
  });
  afterAll(async () => {
    await nc?.drain();
    for (const server of servers) await server.close();
    await h?.close();
  });

  it("sums each model's minutes over 30 minutes and a day on registry's clock, and forgets them after", async () => {
    const server = await startRealHoster({ models: ["fig-model"] });
    servers.push(server);
    const { hoster } = await h.client.registerHoster({
      name: "Figures GPUs",
      email: `figures-${randomUUID()}@example.com`,
      endpointUrl: server.url,
      apiKey: server.token,
      inviteCode: h.accounts.invite(),
      password: "",
      clientIp: "203.0.113.9",
      models: [HosterModel.fromPartial({ modelId: "fig-model", contextWindow: 8192n })],
    });
    const hosterId = hoster!.hosterId;
    const names = eventNames(h.config.EVENTS_PREFIX);
    const startedAt = new Date(Math.floor(Date.now() / 60_000) * 60_000 - 60_000);
    now = new Date(startedAt.getTime() + 90_000);
    const publish = (e: Partial<UsageCompleted>) => {
      const usage = event({ hosterId, modelId: "fig-model", startedAt: startedAt.toISOString(), ...e });
      return jetstream(nc).publish(names.usageCompleted, UsageCompleted.encode(usage).finish(), {
        msgID: usage.requestId,
      });
    };
    for (let i = 0; i < 7; i++) {
      await publish({
        success: true,
        upstreamStatus: 200,
        latencyMs: 400n,
        timeToFirstTokenMs: 80n,
        outputTokens: 33n,
      });
    }
    for (let i = 0; i < 2; i++) await publish({ errorCode: "upstream_error", upstreamStatus: 500 });
    await publish({ errorCode: "rate_limit_exceeded", upstreamStatus: 429 });

    const statsOf = async () => (await h.client.getHoster({ hosterId })).hoster!.models[0]!.stats!;
    const stats = await waitFor(statsOf, (s) => s.last30m?.requests === 10n);
    expect(stats.last30m).toMatchObject({
      requests: 10n,
      successes: 7n,
      faults: 2n,
      upstream429s: 1n,
      latencyP50Ms: 500n,
      latencyP90Ms: 500n,
      ttftP50Ms: 100n,
      // 32 tokens after the first in 320 ms.
      tokensPerSecondP50: 100n,
    });
    expect(stats.last30m!.uptime).toBeCloseTo(7 / 9);
    expect(stats.last1d).toEqual(stats.last30m);
    // The public list shows the same figures.
    const listed = (await h.client.listHosters({})).hosters.find((x) => x.hosterId === hosterId)!;
    expect(listed.models[0]!.stats).toEqual(stats);

    // And Prometheus, the last 30 minutes.
    const scraped = await (await fetch(`http://127.0.0.1:${h.registry.metricsPort}/metrics`)).text();
    const labels = `{hoster_id="${hosterId}",model_id="fig-model"}`;
    expect(scraped).toContain(`mkt_endpoint_requests_30m${labels} 10`);
    expect(scraped).toContain(`mkt_endpoint_faults_30m${labels} 2`);
    expect(scraped).toContain(`mkt_endpoint_upstream_429s_30m${labels} 1`);
    expect(scraped).toContain(`mkt_endpoint_latency_p50_seconds${labels} 0.5`);
    expect(scraped).toMatch(
      new RegExp(`mkt_endpoint_uptime_ratio\\{hoster_id="${hosterId}",model_id="fig-model"\\} 0\\.77`),
    );

    // 31 minutes on, the day still counts them; a day on, nothing does.
    now = new Date(startedAt.getTime() + 31 * 60_000 + 1_000);
    const later = await statsOf();
    expect(later.last30m).toMatchObject({ requests: 0n, faults: 0n });
    expect(later.last30m!.uptime).toBeUndefined();
    expect(later.last1d).toEqual(stats.last1d);
    now = new Date(startedAt.getTime() + 24 * 60 * 60_000 + 61_000);
    expect((await statsOf()).last1d).toMatchObject({ requests: 0n });
  });
});
