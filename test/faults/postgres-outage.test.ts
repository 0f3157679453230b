import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startPrivatePostgres, type PrivatePostgres } from "@mkt/testkit/postgres-server";
import { registerHoster, subscribeToFreePlan, type RegisteredHoster } from "../e2e/hoster-fixture.ts";
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
import { startTraffic, tally, type Client } from "./traffic.ts";

// PostgreSQL stopped for a few seconds under a running system (once "Postgres down 8 s →
// 26,156 × 500"; docs/adr/0027-dependency-outage-is-503.md). The system runs on a PostgreSQL of
// this file's own; the shared one is never touched.

/** The outage once measured: PostgreSQL down 8 s under 24 streaming clients. */
const OUTAGE_MS = 8_000;
const CLIENTS = 24;
/** Each client's pause between requests: 24 clients sample the outage without flooding 2 cores. */
const PAUSE_MS = 100;
/**
 * The bound on recovery after the dependency's return (docs/adr/0027-dependency-outage-is-503.md).
 */
const RECOVERY_BOUND_MS = 5_000;

/** The clients' pace must not meet the free tier's 60 a minute. */
const ROOMY_TIER = JSON.stringify({ free: { limit_per_minute: 10_000, limit_per_day: 100_000 } });

let postgres: PrivatePostgres;
let system: RunningSystem;
let hoster: RegisteredHoster;

beforeAll(async () => {
  postgres = await startPrivatePostgres();
  system = await startSystem({
    postgresUrl: postgres.url,
    billing: { TIERS: ROOMY_TIER, ...faultLeaseEnv.billing },
    edge: faultLeaseEnv.edge,
    accounts: faultLeaseEnv.ttl,
  });
  hoster = await registerHoster(system, { name: "Outage Hoster" });
});

afterAll(async () => {
  await postgres?.start();
  await hoster?.server.close();
  await system?.close();
  await postgres?.close();
});

/**
 * A customer subscribed to a free plan of the hoster: its scoped key's chats are routed from
 * registry's hoster rows, which are read from the database (and cached for seconds).
 */
async function scopedClient(): Promise<Client> {
  const { scopedKey } = await subscribeToFreePlan(system, hoster, { rpmLimit: 10_000, maxConcurrent: 10 });
  return { apiKey: scopedKey, model: hoster.modelId, kinds: ["chat", "stream", "usage"] };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("PostgreSQL stopped under traffic", () => {
  it("answers 503 with retry-after (never 500), is unready while down, recovers within 5 s, conserves money", async () => {
    const keys = await Promise.all([0, 1, 2].map(() => signUp(system.url)));
    const scoped = await scopedClient();
    const readiness = watchReadiness(system.readyzUrls);
    // Three accounts' keys and a scoped key, six clients each.
    const clients = [...keys.map((k) => k.apiKey), scoped];
    const traffic = startTraffic(
      system.url,
      Array.from({ length: CLIENTS }, (_, i) => clients[i % clients.length]!),
      PAUSE_MS,
    );
    await sleep(1_500);

    const stoppedAt = Date.now();
    await postgres.stop();
    await sleep(OUTAGE_MS);
    await postgres.start();
    const back = Date.now();
    await sleep(RECOVERY_BOUND_MS + 1_000);
    const outcomes = await traffic.stop();
    const quietAt = Date.now();
    await readiness.stop();

    const during = outcomes.filter((o) => o.sentAt >= stoppedAt && o.sentAt < back);
    console.info(JSON.stringify(tally(during)));
    // The outage was felt: reads that need the database were refused while it lasted.
    expect(
      during.some((o) => o.status === 503),
      JSON.stringify(tally(during)),
    ).toBe(true);
    expectOnlySuccessOr503(outcomes);
    expect(readiness.allUnreadyBetween(stoppedAt, back)).toEqual({ accounts: true, billing: true, registry: true });

    const readyAgain = readiness.readyAgainMs(back);
    const reads = recoveryMs(outcomes, back, ["usage", "keys"]);
    const chats = recoveryMs(outcomes, back, ["chat", "stream"]);
    console.info(`PostgreSQL back: ready again in ${readyAgain} ms, reads in ${reads} ms, chats in ${chats} ms`);
    expect(readyAgain).toBeLessThan(RECOVERY_BOUND_MS);
    expect(reads).toBeLessThan(RECOVERY_BOUND_MS);
    expect(chats).toBeLessThan(RECOVERY_BOUND_MS);
    // Everything sent well after the return succeeded.
    const settled = outcomes.filter((o) => o.sentAt >= back + RECOVERY_BOUND_MS);
    expect(settled.length).toBeGreaterThan(0);
    expect(settled.filter((o) => o.status !== 200)).toEqual([]);

    // No hold or slot outlives its deadline (those that fell due while PostgreSQL was down are due at its return).
    const leases = await expectAllReleased(system.databaseUrl, { ...FAULT_LEASES, billingBackAt: back }, quietAt);
    console.info(`${leases.leases} leases all released ${leases.releasedMs} ms after the traffic stopped`);
    await expectConservation(system, outcomes);
  }, 90_000);
});
