import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startPrivateNatsServer, type PrivateNatsServer } from "@mkt/testkit/nats-server";
import { signUp, startSystem, type RunningSystem } from "../e2e/system.ts";
import {
  expectAllReleased,
  expectConservation,
  FAULT_LEASES,
  faultLeaseEnv,
  expectOnlySuccessOr503,
  recoveryMs,
  watchReadiness,
} from "./fault-checks.ts";
import { startTraffic, tally } from "./traffic.ts";

// NATS stopped for a few seconds under a running system: the edge hands usage to billing's
// RecordUsage, readiness reports the lost connection, and nothing answers 500. The system runs on a
// nats-server of this file's own; the shared one is never touched.

/** The outage once measured: NATS down 10 s under 24 streaming clients. */
const OUTAGE_MS = 10_000;
const CLIENTS = 24;
/** Each client's pause between requests: 24 clients sample the outage without flooding 2 cores. */
const PAUSE_MS = 100;
/**
 * The bound on recovery after the dependency's return (docs/adr/0027-dependency-outage-is-503.md).
 */
const RECOVERY_BOUND_MS = 5_000;
/** The clients' pace must not meet the free tier's 60 a minute. */
const ROOMY_TIER = JSON.stringify({ free: { limit_per_minute: 10_000, limit_per_day: 100_000 } });

let nats: PrivateNatsServer;
let system: RunningSystem;

beforeAll(async () => {
  nats = await startPrivateNatsServer();
  system = await startSystem({
    natsUrl: nats.url,
    billing: { TIERS: ROOMY_TIER, ...faultLeaseEnv.billing },
    edge: faultLeaseEnv.edge,
    accounts: faultLeaseEnv.ttl,
  });
});

afterAll(async () => {
  await nats?.start();
  await system?.close();
  await nats?.close();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("NATS stopped under traffic", () => {
  it("answers or 503s with retry-after (never 500), is unready while down, recovers within 5 s, bills every answer", async () => {
    const keys = await Promise.all([0, 1, 2, 3].map(() => signUp(system.url)));
    const readiness = watchReadiness(system.readyzUrls);
    // Four accounts, six clients each.
    const traffic = startTraffic(
      system.url,
      Array.from({ length: CLIENTS }, (_, i) => keys[i % keys.length]!.apiKey),
      PAUSE_MS,
    );
    await sleep(1_500);

    const stoppedAt = Date.now();
    await nats.stop();
    await sleep(OUTAGE_MS);
    await nats.start();
    const back = Date.now();
    await sleep(RECOVERY_BOUND_MS + 1_000);
    const outcomes = await traffic.stop();
    const quietAt = Date.now();
    await readiness.stop();

    console.info(JSON.stringify(tally(outcomes.filter((o) => o.sentAt >= stoppedAt && o.sentAt < back))));
    expectOnlySuccessOr503(outcomes);
    expect(readiness.allUnreadyBetween(stoppedAt, back)).toEqual({ accounts: true, billing: true, registry: true });

    const readyAgain = readiness.readyAgainMs(back);
    const chats = recoveryMs(outcomes, back, ["chat", "stream"]);
    const reads = recoveryMs(outcomes, back, ["usage", "keys"]);
    console.info(`NATS back: ready again in ${readyAgain} ms, chats in ${chats} ms, reads in ${reads} ms`);
    expect(readyAgain).toBeLessThan(RECOVERY_BOUND_MS);
    expect(chats).toBeLessThan(RECOVERY_BOUND_MS);
    expect(reads).toBeLessThan(RECOVERY_BOUND_MS);
    const settled = outcomes.filter((o) => o.sentAt >= back + RECOVERY_BOUND_MS);
    expect(settled.length).toBeGreaterThan(0);
    expect(settled.filter((o) => o.status !== 200)).toEqual([]);

    // No hold or slot outlives its deadline.
    const leases = await expectAllReleased(system.databaseUrl, { ...FAULT_LEASES }, quietAt);
    console.info(`${leases.leases} leases all released ${leases.releasedMs} ms after the traffic stopped`);
    // Every answer billed exactly once: those JetStream could not take went to billing's
    // RecordUsage, and none waits in the edge's memory.
    await expectConservation(system, outcomes);
    const metrics = await (await fetch(`${system.url}/metrics`)).text();
    const sample = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(metrics)?.[1] ?? "0");
    console.info(`usage events recorded through billing: ${sample("mkt_usage_record_fallbacks_total")}`);
    expect(sample("mkt_usage_record_fallbacks_total")).toBeGreaterThan(0);
    expect(sample("mkt_usage_pending_events")).toBe(0);
  }, 90_000);
});
