/**
 * Every process of the system killed (or NATS paused) in turn, at the product's default lease
 * settings (LEASE_TTL_MS 2 s, EDGE_ISOLATION_MS 60 s, MAX_REQUEST_MS 10.5 min), under three clients
 * of one subscriber with `max_concurrent` 3 looping without pause, and a platform key probing each
 * restart. Every process is its real `main.ts` (test/chaos/chaos-system.ts, one edge), so a kill is
 * a real crash.
 *
 * What must hold (docs/testing.md, "No blame, and recovery"):
 * - a client whose own limits were never reached is never refused 429 (three clients cannot hold
 *   more than their three slots; the plan's rpm and the tier are roomy): while a dependency is
 *   down a request the lease cannot admit gets a 503 with retry-after;
 * - 5 s after each process is back the subscriber's three concurrent requests are all served: no
 *   slot stays held by a call a fault cut off;
 * - each process's recovery, from its being back (ready) to the first answer served through it (a
 *   4-token answer on a platform key, with nothing else running), is at most 2 s; the figures are
 *   printed for both runs.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startChaosSystem, type ChaosProcess, type ChaosSystem } from "../chaos/chaos-system.ts";
import { postChat } from "../e2e/billing-db.ts";
import { registerHoster, subscribeToFreePlan, type RegisteredHoster } from "../e2e/hoster-fixture.ts";
import { signUp } from "../e2e/system.ts";
import { startTraffic, tally, type Client, type Outcome } from "./traffic.ts";

const MAX_CONCURRENT = 3;
/** The bound on the subscriber's full max_concurrent being served again after a fault. */
const FULL_AGAIN_MS = 5_000;
/** How long the next fault waits for the sample of requests sent FULL_AGAIN_MS after the last. */
const SAMPLE_WAIT_MS = 30_000;
/** The bound on a process's recovery: its being back to the first answer through it. */
const RECOVERY_BOUND_MS = 2_000;
/** How long a killed process stays dead (NATS paused) before it is started again. */
const DOWN_MS = 2_000;
/** The pace must not meet any limit of the subscriber's: its plan's rpm, its account's tier. */
const ROOMY_TIER = JSON.stringify({ free: { limit_per_minute: 100_000, limit_per_day: 10_000_000 } });

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The hoster's model, served by the system's hoster server. */
const HOSTER_MODEL = "no-blame-8b";

let chaos: ChaosSystem;
let hoster: RegisteredHoster;
/** The system's processes by name (accounts, registry, billing, edge-0, model, nats, …). */
let processes: Map<string, ChaosProcess>;

beforeAll(async () => {
  // One edge, every lease setting the product's default (none given).
  chaos = await startChaosSystem({
    billing: { TIERS: ROOMY_TIER },
    leases: { ttl: {}, billing: {}, edge: {} },
    edges: 1,
    hosterModelId: HOSTER_MODEL,
    // The subscriber's answers take 2 s (8 tokens at 4 a second), so its three calls are in flight
    // across every fault: a fence (billing back), a recall or a cut races their end, and billing
    // must learn when they ended (a closed lease's slots count its calls then in flight).
    hosterEnv: { DEMO_TOKENS_PER_SECOND: "4" },
  });
  processes = new Map(chaos.processes.map((p) => [p.name, p]));
  const server = chaos.hosterServer;
  hoster = await registerHoster(chaos.system, {
    modelId: HOSTER_MODEL,
    startServer: async () => ({ url: server.url, token: server.token, close: async () => {} }),
  });
}, 180_000);

afterAll(async () => {
  await chaos?.close();
});

/**
 * Milliseconds from `restartedAt` until a 4-token answer on `apiKey` (demo-small, the local model)
 * came back 200: one request at a time, 25 ms apart, sent from the restart on (an edge that is
 * not listening yet refuses the connection; that is part of its recovery).
 */
async function firstAnswerMs(url: string, apiKey: string, restartedAt: number, until: Promise<unknown>) {
  let done = false;
  void until.finally(() => (done = true));
  for (;;) {
    const status = await postChat(url, apiKey, {
      model: "demo-small",
      max_tokens: 4,
      messages: [{ role: "user", content: "ping" }],
    }).then(
      async (res) => (await res.text(), res.status),
      () => 0,
    );
    if (status === 200) return Date.now() - restartedAt;
    if (done && Date.now() - restartedAt > 30_000) return Infinity;
    await sleep(25);
  }
}

interface Fault {
  /** The process. */
  name: string;
  /** When the fault began (kill, SIGSTOP). */
  from: number;
  /** When the process was started again (or SIGCONT). */
  restartedAt: number;
  /** When it was ready again. */
  backAt: number;
  /** When the first answer through it came back. */
  answeredAt: number;
}

/**
 * A process's recovery: from its being back (ready, or SIGCONT) to the first answer served
 * through it. How long Node takes to start a process is the machine's, not the system's (on this
 * shared 2-core runner it ranged from 1 to 13 s under load), so it is printed beside, not counted.
 */
const recoveryMs = (f: Fault) => Math.max(0, f.answeredAt - f.backAt);

/**
 * Each process in turn: broken by `down`, restored DOWN_MS later by `up`, its recovery measured
 * on `probeKey`, then `settleMs` more before the next, and longer while `settled(backAt)` has not
 * resolved. NATS is paused (SIGSTOP) as well as restarted: a silent server is another fault than a
 * refusing one.
 */
async function faultEach(
  probeKey: string,
  settleMs: number,
  settled: (backAt: number) => Promise<unknown> = async () => {},
): Promise<Fault[]> {
  const faults: Fault[] = [];
  const fault = async (name: string, down: () => Promise<void> | void, up: () => Promise<void> | void) => {
    const from = Date.now();
    await down();
    await sleep(DOWN_MS);
    const restartedAt = Date.now();
    const restarting = Promise.resolve(up());
    let backAt = 0;
    const [answeredMs] = await Promise.all([
      firstAnswerMs(chaos.system.url, probeKey, restartedAt, restarting),
      restarting.then(() => (backAt = Date.now())),
    ]);
    faults.push({ name, from, restartedAt, backAt, answeredAt: restartedAt + answeredMs });
    await Promise.all([sleep(Math.max(0, backAt + settleMs - Date.now())), settled(backAt)]);
  };
  const one = (name: string) => processes.get(name)!;
  const nats = one("nats");
  try {
    await fault(
      "billing",
      () => one("billing").kill(),
      () => one("billing").start(),
    );
    await fault(
      "NATS (paused)",
      () => nats.pause(),
      () => nats.resume(),
    );
    for (const [name, process] of [
      ["registry", "registry"],
      ["accounts", "accounts"],
      ["edge", "edge-0"],
      ["local model", "model"],
      ["NATS", "nats"],
    ] as const) {
      await fault(
        name,
        () => one(process).kill(),
        () => one(process).start(),
      );
    }
  } finally {
    nats.resume();
  }
  return faults;
}

const figures = (faults: readonly Fault[]) =>
  faults
    .map(
      (f) =>
        `  ${f.name}: down ${f.restartedAt - f.from} ms, started in ${f.backAt - f.restartedAt} ms, ` +
        `first answer ${recoveryMs(f)} ms after it was back`,
    )
    .join("\n");

describe("every process killed in turn (NATS also paused) at production lease defaults", () => {
  // Not retried: a second attempt would run on a system seven faults old.
  it(
    "never blames a subscriber with a 429 for an outage and gives it its max_concurrent back within 5 s",
    { timeout: 420_000, retry: 0 },
    async () => {
      const { system } = chaos;
      // Its limits beyond the slots are out of reach: the plan's rpm, its tpm (each request counts
      // its prompt and max_tokens), the account's tier (ROOMY_TIER).
      const { scopedKey } = await subscribeToFreePlan(system, hoster, {
        rpmLimit: 100_000,
        tpmLimit: 100_000_000,
        maxConcurrent: MAX_CONCURRENT,
      });
      const platform = await signUp(system.url);
      const scoped: Client = { apiKey: scopedKey, model: hoster.modelId, kinds: ["chat", "stream"] };
      const traffic = startTraffic(
        system.url,
        Array.from({ length: MAX_CONCURRENT }, () => scoped),
        0,
      );
      await sleep(3_000);
      // After each fault, the full max_concurrent must be served again from FULL_AGAIN_MS on: the
      // next fault waits until that many requests sent from then have ended (a fixed window missed
      // them when a loaded runner stretched the 2 s answers), or SAMPLE_WAIT_MS, after which the
      // count below fails as it should: calls still held then are the fault's.
      const sampled = async (backAt: number) => {
        const until = Date.now() + SAMPLE_WAIT_MS;
        while (Date.now() < until) {
          const ended = traffic.outcomes.filter((o) => o.sentAt >= backAt + FULL_AGAIN_MS).length;
          if (ended >= MAX_CONCURRENT) return;
          await sleep(100);
        }
      };
      const faults = await faultEach(platform.apiKey, FULL_AGAIN_MS + 4_000, sampled);
      const outcomes = await traffic.stop();

      // Once every fault is over, three concurrent requests: every slot is free.
      const last = await Promise.all(
        Array.from({ length: MAX_CONCURRENT }, async (_, i) => {
          const res = await postChat(system.url, scopedKey, {
            model: hoster.modelId,
            max_tokens: 4,
            messages: [{ role: "user", content: `last ${i}` }],
          });
          return `${res.status} ${res.status === 200 ? "" : await res.text()}`.trim();
        }),
      );

      const lines = faults.map((f) => {
        const during = outcomes.filter((o) => o.sentAt >= f.from && o.sentAt < f.backAt + FULL_AGAIN_MS);
        return `  ${f.name}: the subscriber meanwhile ${JSON.stringify(tally(during))}`;
      });
      console.info(
        `under three looping subscriber clients (back → first answer on a platform key):\n${figures(faults)}\n` +
          lines.join("\n"),
      );

      // 1. No 429: the subscriber never had more than its three requests in flight.
      const blamed = outcomes.filter((o) => o.status === 429);
      expect(
        blamed.map((o) => `${o.what} 429 ${o.errorCode} at ${faultAt(faults, o)}: ${o.errorMessage}`),
        "429s answered to a client whose own limit was not reached",
      ).toEqual([]);
      // Anything else refused was a 503 with retry-after (a dependency's outage).
      const refused = outcomes.filter((o) => o.status >= 500 && (o.status !== 503 || o.retryAfter === null));
      expect(refused.map((o) => `${o.what} ${o.status} ${o.errorCode ?? ""} at ${faultAt(faults, o)}`)).toEqual([]);

      // 2. From 5 s after each process was back until the next fault, every request was served.
      for (const [i, f] of faults.entries()) {
        const next = faults[i + 1]?.from ?? Infinity;
        // Answered before the next fault began: one cut off by it is that fault's.
        const settled = outcomes.filter((o) => o.sentAt >= f.backAt + FULL_AGAIN_MS && o.doneAt < next);
        expect(settled.length, `${f.name}: requests sampled 5 s after it was back`).toBeGreaterThanOrEqual(
          MAX_CONCURRENT,
        );
        expect(
          settled
            .filter((o) => o.status !== 200 || o.whole === false)
            .map((o) => `${o.what} ${o.status} ${o.errorCode ?? ""}`),
          `${f.name}: the subscriber's requests 5 s after it was back`,
        ).toEqual([]);
      }
      expect(last).toEqual(Array.from({ length: MAX_CONCURRENT }, () => "200"));
    },
  );

  // The figures of the probe: one platform key's 4-token answers, nothing else running.
  it("recovers each process within 2 s of its being back (printed)", { timeout: 180_000, retry: 0 }, async () => {
    const platform = await signUp(chaos.system.url);
    const faults = await faultEach(platform.apiKey, 1_000);
    console.info(`recovery at production defaults (back → first answer on a platform key):\n${figures(faults)}`);
    for (const f of faults) {
      expect(recoveryMs(f), `${f.name}: back to first answer`).toBeLessThanOrEqual(RECOVERY_BOUND_MS);
    }
  });
});

/** Where an outcome fell: "billing +1234 ms" from the start of the last fault before it. */
function faultAt(faults: readonly Fault[], o: Outcome): string {
  const f = faults.filter((one) => one.from <= o.sentAt).at(-1);
  return f ? `${f.name} +${o.sentAt - f.from} ms` : "before any fault";
}
