import { expect } from "vitest";
import { prng } from "../../hoster-server/src/demo/demo-text.ts";
import { openBillingDb } from "../e2e/billing-db.ts";
import { registerOpenHoster, subscribeToFreePlan } from "../e2e/hoster-fixture.ts";
import { signUp } from "../e2e/system.ts";
import { expectAllReleased, expectConservation, FAULT_LEASES } from "../faults/fault-checks.ts";
import { startTraffic, tally, type Client, type Outcome } from "../faults/traffic.ts";
import { startChaosSystem, type ChaosProcess } from "./chaos-system.ts";

/** How a soak is run: its length and the seed every fault is drawn from. */
export interface ChaosOptions {
  seconds: number;
  seed: number;
  /** Where the run's lines go (the fault schedule as it happens, the figures at the end). */
  log: (line: string) => void;
}

/** One fault as the seed drew it. */
export interface Fault {
  /** The quiet before it: milliseconds after the previous process served again. */
  afterMs: number;
  process: string;
  action: "kill" | "pause";
  /** How long the process stays dead or frozen. */
  forMs: number;
}

/** The clients' pace must not meet their tiers' or plans' limits: refusals would hide the faults. */
const ROOMY_TIER = JSON.stringify({ free: { limit_per_minute: 100_000, limit_per_day: 10_000_000 } });
/** 8 tokens (traffic.ts's max_tokens) at 40 a second: answers stream ~0.2 s, so kills cut some. */
const MODEL_ENV = { DEMO_TOKENS_PER_SECOND: "40" };
/** Each client's pause between requests: a dozen clients on two edges without flooding 2 cores. */
const PAUSE_MS = 100;
/** After the last fault, traffic goes on this long before it stops and the books are checked. */
const CALM_MS = 5_000;
const OPEN_MODEL = "chaos/open-8b";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The faults of a soak, drawn from `seed` alone, so a seed replays the same schedule: one at a
 * time, each 1 to 4 s after the previous one's process serves again, a kill (SIGKILL, started
 * again after 0.5 to 3 s) or a pause (SIGSTOP, SIGCONT after 0.5 to 3 s) of any process. Enough
 * for `seconds` if restarts were instant; the run stops drawing from it when its time is up.
 */
export function faultSchedule(seed: number, seconds: number, processes: readonly string[]): Fault[] {
  const random = prng(seed);
  const between = (min: number, max: number) => Math.round(min + random() * (max - min));
  const faults: Fault[] = [];
  for (let total = 0; total < seconds * 1_000;) {
    const fault: Fault = {
      afterMs: between(1_000, 4_000),
      process: processes[Math.floor(random() * processes.length)]!,
      action: random() < 0.6 ? "kill" : "pause",
      forMs: between(500, 3_000),
    };
    faults.push(fault);
    total += fault.afterMs + fault.forMs;
  }
  return faults;
}

/**
 * For a failed conservation check: the success records no whole answer matches and the whole
 * answers no success record matches, with their times in the run's clock, so they can be set
 * against the printed faults (the traffic keeps no request id for a connection that dropped
 * mid-answer).
 */
async function logUnmatchedRecords(
  databaseUrl: string,
  whole: Outcome[],
  faultsFrom: number,
  log: (line: string) => void,
) {
  const received = new Set(whole.map((o) => o.requestId));
  const db = await openBillingDb(databaseUrl);
  try {
    const records = await db.query<{
      request_id: string;
      model_id: string;
      finish_reason: string;
      latency_ms: string;
      created_at: Date;
    }>(`select request_id, model_id, finish_reason, latency_ms::text, created_at from usage_records where success`);
    for (const r of records.filter((r) => !received.has(r.request_id))) {
      log(
        `success record without a whole answer: ${r.request_id} (${r.model_id}, ${r.finish_reason}, ${r.latency_ms} ms, ` +
          `recorded +${((r.created_at.getTime() - faultsFrom) / 1000).toFixed(1)} s)`,
      );
    }
    const recorded = new Set(records.map((r) => r.request_id));
    for (const o of whole.filter((o) => !recorded.has(o.requestId!))) {
      log(
        `whole answer without a success record: ${o.requestId} (${o.what}, sent +${((o.sentAt - faultsFrom) / 1000).toFixed(1)} s)`,
      );
    }
  } finally {
    await db.close();
  }
}

/** Applies one fault and brings its process back; returns when it serves again. */
async function inflict(target: ChaosProcess, fault: Fault): Promise<void> {
  if (fault.action === "kill") {
    await target.kill();
    await sleep(fault.forMs);
    await target.start();
  } else {
    target.pause();
    await sleep(fault.forMs);
    target.resume();
  }
}

/**
 * The chaos soak (docs/testing.md, "The chaos soak"): the whole system as separate processes with
 * two edges, traffic on both from platform keys (the local model), a subscriber's scoped key (a
 * hoster's free plan) and account keys on that hoster's open plan, while every process (both
 * edges, billing, registry, accounts, NATS, PostgreSQL, the local model and the hoster's server)
 * is killed or paused by the seed's schedule. At the end the money invariants must hold: every
 * answer a client received whole is exactly one success record and no other request is (but for
 * answers an edge's kill cut after their usage was durable: at most as many as it cut), postings
 * sum to 0 and every entry balances, the reconciliation finds nothing, grants − charges = posted
 * balances, no wallet is overdrawn, and every lease is released (nothing held, no slot) and none
 * past its deadline. Fails (through vitest's expect) on the first that does not hold.
 */
export async function chaosSoak(options: ChaosOptions): Promise<void> {
  const { seconds, seed, log } = options;
  const started = Date.now();
  const chaos = await startChaosSystem({
    billing: { TIERS: ROOMY_TIER },
    modelEnv: MODEL_ENV,
    hosterModelId: "chaos-8b",
  });
  try {
    const { system } = chaos;
    const hoster = await registerOpenHoster(system, {
      name: "Chaos Hoster",
      canonicalId: OPEN_MODEL,
      modelId: "chaos-8b",
      onServer: { url: chaos.hosterServer.url, token: chaos.hosterServer.token },
      plan: { input_price_per_1m_usd: 1, output_price_per_1m_usd: 2, rpm_limit: 100_000, max_concurrent: 50 },
    });
    const platform = await Promise.all([0, 1].map(() => signUp(system.url)));
    const open = await signUp(system.url);
    const { scopedKey } = await subscribeToFreePlan(system, hoster, { rpmLimit: 100_000, maxConcurrent: 10 });
    const clients: Client[] = [
      ...platform.map((p) => ({ apiKey: p.apiKey })),
      { apiKey: scopedKey, model: hoster.modelId, kinds: ["chat", "stream", "usage"] },
      { apiKey: open.apiKey, model: OPEN_MODEL, kinds: ["chat", "stream", "usage"] },
    ];
    log(`system up in ${((Date.now() - started) / 1000).toFixed(1)} s; ${seconds} s of faults`);

    // Each client on both edges: the same accounts' leases on two edges at once.
    const traffic = system.urls.map((url) => startTraffic(url, [...clients, ...clients], PAUSE_MS));
    const byName = new Map(chaos.processes.map((p) => [p.name, p]));
    const schedule = faultSchedule(seed, seconds, [...byName.keys()]);
    const faultsFrom = Date.now();
    /** When billing last could release again (it or PostgreSQL back): leases due before wait for it. */
    let billingBackAt = faultsFrom;
    /** When each edge was killed, by its index (its traffic's). */
    const edgeKills: Array<{ edge: number; at: number }> = [];
    for (const fault of schedule) {
      await sleep(fault.afterMs);
      if (Date.now() - faultsFrom >= seconds * 1_000) break;
      const begun = Date.now();
      if (fault.action === "kill" && fault.process.startsWith("edge-")) {
        edgeKills.push({ edge: Number(fault.process.slice("edge-".length)), at: begun });
      }
      await inflict(byName.get(fault.process)!, fault);
      const back = Date.now();
      // A restarted billing's lease closer first runs one TTL after its start (repeatEvery), so
      // leases that fell due while it was down are due then; a paused one's overdue timer fires
      // at once, and a failed pass (PostgreSQL down) is retried within the TTL anyway.
      if (fault.process === "postgres" || (fault.process === "billing" && fault.action === "pause"))
        billingBackAt = back;
      if (fault.process === "billing" && fault.action === "kill") billingBackAt = back + FAULT_LEASES.leaseTtlMs;
      // A killed process's restart is worth a figure; a paused one goes on where it stopped.
      const after = fault.action === "kill" ? `, serving again ${back - begun - fault.forMs} ms after its start` : "";
      log(
        `+${((begun - faultsFrom) / 1000).toFixed(1)} s ${fault.action} ${fault.process} for ${fault.forMs} ms${after}`,
      );
    }
    await sleep(CALM_MS);
    const perEdge = await Promise.all(traffic.map((t) => t.stop()));
    const outcomes: Outcome[] = perEdge.flat();
    // The answers each edge's kill cut in flight: their clients saw the connection drop.
    const cut = edgeKills.flatMap(({ edge, at }) =>
      perEdge[edge]!.filter(
        (o) => (o.what === "chat" || o.what === "stream") && o.status === 0 && o.sentAt <= at && o.doneAt >= at,
      ),
    );
    const quietAt = Date.now();
    log(`traffic: ${JSON.stringify(tally(outcomes))}`);
    const whole = outcomes.filter(
      (o) => (o.what === "chat" || o.what === "stream") && o.status === 200 && o.whole !== false,
    );
    log(`answers received whole: ${whole.length}`);

    try {
      const { billedButCut } = await expectConservation(system, outcomes, cut.length);
      log(
        `answers an edge's kill cut: ${cut.length}; of those billed, their usage durable before the kill: ` +
          `${billedButCut.length}`,
      );
    } catch (err) {
      await logUnmatchedRecords(system.databaseUrl, whole, faultsFrom, log);
      throw err;
    }
    const db = await openBillingDb(system.databaseUrl);
    try {
      expect(await db.figure(`select count(*)::text as v from wallets where posted_micros < 0`)).toBe(0n);
    } finally {
      await db.close();
    }
    const released = await expectAllReleased(system.databaseUrl, { ...FAULT_LEASES, billingBackAt }, quietAt);
    log(`every lease released ${released.releasedMs} ms after traffic stopped (${released.leases} leases)`);
    log(`money conserved; seed ${seed} passed in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  } finally {
    // A failed check must not leave a process frozen for close() to wait on.
    for (const one of chaos.processes) one.resume();
    await chaos.close();
  }
}
