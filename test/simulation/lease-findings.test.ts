import { afterAll, beforeAll, expect, it } from "vitest";
import type { Step } from "./lease-steps.ts";
import { LeaseWorld } from "./lease-world.ts";
import { runSteps } from "./run-simulation.ts";
import { SimBilling } from "./sim-billing.ts";

/**
 * What the simulation found, each as the short case it shrank to: every one failed before its
 * fix (docs/leases.md#the-protocol-simulated).
 */
let sim: SimBilling;

beforeAll(async () => {
  sim = await SimBilling.start();
});
afterAll(async () => {
  await sim?.close();
});

/** A step without its seed (each kind's fields kept). */
type Unseeded<T> = T extends unknown ? Omit<T, "seed"> : never;

const cases: Record<string, Array<Unseeded<Step>>> = {
  // Billing unreachable for over a TTL with a subscriber's call running: the edge's lease lapses,
  // the heartbeat after the outage says it was fenced, and its final report closes it with the
  // call's slot in flight. Billing held that slot until the lease's release (MAX_REQUEST_MS), long
  // after the call ended: the subscriber was refused 429 with nothing running (the race of the
  // fault runs, where billing was killed under three looping clients).
  "a slot in flight at a fenced lease's final report returns when its call ends": [
    { kind: "subscriberCall", edge: 0 },
    { kind: "billingDown" },
    { kind: "advance", ms: 2500 },
    { kind: "billingUp" },
    { kind: "beat", edge: 0 },
    { kind: "advance", ms: 500 },
    { kind: "beat", edge: 0 },
    { kind: "advance", ms: 500 },
    { kind: "end", pick: 0, outputShare: 1 },
    { kind: "quiet" },
  ],
  // Requests granted within a millisecond of the edge's heartbeat measured their demand over that
  // millisecond (a thousand a second): the lease took the plan's whole minute, which a crash then
  // left counted, so the restarted edge's subscriber was refused 429 for the rest of the minute.
  "a grant right after a heartbeat asks for its demand, not the window": [
    { kind: "subscriberCall", edge: 1 },
    { kind: "subscriberCall", edge: 1 },
    { kind: "subscriberCall", edge: 1 },
    { kind: "crash", edge: 1 },
    { kind: "quiet" },
  ],
  // A retired lease's final report counted the subscriber's call in flight; the call ended before
  // the heartbeat's reply said the lease closed, and the edge forgot the lease at that reply (no
  // call on its slots ran any more), so nothing ever told billing the call had ended: billing
  // counted its slot until the lease's release (MAX_REQUEST_MS), and the subscriber's full
  // max_concurrent was refused a 429 long after every fault.
  "a call ending between a heartbeat and its reply that closes the lease still gives its slot back": [
    { kind: "subscriberCall", edge: 0 },
    { kind: "billingDown" },
    { kind: "advance", ms: 2500 },
    { kind: "billingUp" },
    { kind: "beat", edge: 0 },
    { kind: "advance", ms: 500 },
    { kind: "faults", edge: 0, faults: { dropCall: 0, dropReply: 0, delay: 1, duplicate: 0 } },
    { kind: "beat", edge: 0 },
    { kind: "deliver", pick: 0 },
    { kind: "end", pick: 0, outputShare: 1 },
    { kind: "deliver", pick: 0 },
    { kind: "faults", edge: 0, faults: { dropCall: 0, dropReply: 0, delay: 0, duplicate: 0 } },
    { kind: "quiet" },
  ],
  // Two processes under one EDGE_ID side by side, as a rolling restart gone wrong leaves them: the
  // new process's first heartbeat takes the next incarnation, and billing closes and releases
  // every lease of the old one at once, credit hold included. Nothing told the old process until
  // a lease call of its own was refused, and meanwhile it admitted in memory on its leases (valid
  // up to a TTL after its last heartbeat): the third step's request (seed 3: the balancer's pick
  // is the old process) was admitted on a lease billing had released. Billing now announces a new
  // incarnation on the edge's recall subject, and the old process drops everything on hearing it.
  "a process superseded while still running admits nothing on the leases billing released": [
    { kind: "call", edge: 0, account: 0, outputTokens: 100 },
    { kind: "takeover", edge: 0 },
    { kind: "call", edge: 0, account: 0, outputTokens: 100 },
  ],
};

/** Runs a case with seeds 1, 2, 3 …: it must hold every invariant to its end. */
async function holds(steps: Array<Unseeded<Step>>): Promise<void> {
  const result = await runSteps(
    sim,
    steps.map((step, i) => ({ ...step, seed: i + 1 }) as Step),
  );
  expect(result.failure?.violations ?? []).toEqual([]);
  expect(result.steps).toBe(steps.length);
}

for (const [name, steps] of Object.entries(cases)) {
  it(name, { timeout: 60_000 }, () => holds(steps));
}

// Billing unreachable for more than a TTL: the grant of the account's next request finds the
// edge's session lapsed and fences its lease, whose unused request room (this minute's, lent for
// the account's demand) stayed counted until the edge's final report a heartbeat later, so that
// grant was refused 429 though the account had used 8 of its 20 requests.
it("a grant that fences the edge's lapsed lease gives its unused room back before it sizes the next", async () => {
  const world = await LeaseWorld.create(sim);
  try {
    const steps: Array<Unseeded<Step>> = [
      ...Array.from({ length: 8 }, () => ({ kind: "call", edge: 0, account: 0, outputTokens: 100 }) as const),
      ...Array.from({ length: 8 }, () => ({ kind: "end", pick: 0, outputShare: 1 }) as const),
      { kind: "advance", ms: 500 },
      { kind: "beat", edge: 0 },
      { kind: "billingDown" },
      { kind: "advance", ms: 2500 },
      { kind: "billingUp" },
      { kind: "call", edge: 0, account: 0, outputTokens: 100 },
    ];
    for (const [i, step] of steps.entries()) await world.run({ ...step, seed: i + 1 } as Step);
    const last = world.calls.at(-1)!;
    expect(last.refusal?.message).toBeUndefined();
    expect(last.state).toBe("running");
  } finally {
    await world.close();
  }
});

// Billing unreachable for more than a TTL with the subscriber's three calls running: the grant of
// its next request (one of them ended) fences the edge's lapsed lease and closes it on the grant's
// report, with its two calls then running counted as its slots. One of those calls ends: its slot
// is free at the edge, but the lease is retired there, and only a heartbeat reported it. The grant
// of the subscriber's next request, before that heartbeat, counted the ended call's slot and was
// refused 429 with two calls running of three (and the edge then answered every request with it
// from its refusal cache): the no-blame fault run's burst of 429s after billing came back.
it("a call ended on a lease a grant closed frees its slot for the next grant, before any heartbeat", async () => {
  const world = await LeaseWorld.create(sim);
  try {
    const steps: Array<Unseeded<Step>> = [
      { kind: "subscriberCall", edge: 0 },
      { kind: "subscriberCall", edge: 0 },
      { kind: "subscriberCall", edge: 0 },
      { kind: "billingDown" },
      { kind: "advance", ms: 2500 },
      { kind: "billingUp" },
      // The first call ends while the lease is lapsed; the next request's grant closes that lease
      // with the other two running.
      { kind: "end", pick: 0, outputShare: 1 },
      { kind: "subscriberCall", edge: 0 },
      // The second ends on the retired lease; the next request needs its slot.
      { kind: "end", pick: 0, outputShare: 1 },
      { kind: "subscriberCall", edge: 0 },
    ];
    for (const [i, step] of steps.entries()) await world.run({ ...step, seed: i + 1 } as Step);
    const [, , third, fourth, fifth] = world.calls;
    expect([third?.state, fourth?.state]).toEqual(["running", "running"]);
    expect(fifth?.refusal?.message).toBeUndefined();
    expect(fifth?.state).toBe("running");
    expect(world.blamed).toBe(0);
  } finally {
    await world.close();
  }
});
