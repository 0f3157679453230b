import { checkInvariants, slotHolders, slotsHeld } from "./lease-invariants.ts";
import { describeStep, generateSteps, type Step } from "./lease-steps.ts";
import { LeaseWorld } from "./lease-world.ts";
import type { SimBilling } from "./sim-billing.ts";

export interface RunResult {
  steps: number;
  /** Invariant checks made (one per invariant per step, and the quiet points'). */
  checks: number;
  quietPoints: number;
  calls: { admitted: number; refused: Record<string, number> };
  /** The subscriber's 429s answered while fewer than max_concurrent of its calls ran (counted, not failed: see docs). */
  blamed: number;
  blamedFor: Record<string, number>;
  failure?: { step: number; violations: string[] };
}

/**
 * The quiet point: every fault healed, every call ended; within a few heartbeats billing must hold
 * no slot of the subscriber, and one edge must then admit its whole max_concurrent at once.
 */
async function quietPoint(world: LeaseWorld): Promise<string[]> {
  await world.heal();
  for (const call of world.running()) await world.endCall(call, 0.5);
  await world.settle();
  // Heartbeats every half TTL (billing's now, which the edges follow), as the edges send them: two
  // TTLs of them (an idle lease goes back after 2 TTL), then more while billing still holds a slot.
  const ttlMs = world.sim.settings.ttlMs;
  for (let round = 0; round < 16 && (round < 4 || (await slotsHeld(world)) > 0n); round++) {
    await world.advance(ttlMs / 2);
    world.beatAll();
    await world.settle();
    await world.sim.t.billing.closeDueLeases();
    // A request still waiting when the faults healed (on a window, a grant) ends once admitted.
    for (const call of world.running()) await world.endCall(call, 0.5);
  }
  const held = await slotsHeld(world);
  // A request still being admitted may hold a slot lent for it: it waits for a window's room on a
  // real timer (admit-or-grant.ts), which the simulated clock does not move. Its slot returns
  // when it ends; the full max_concurrent is checked at the next quiet point.
  const waiting = world.calls.filter((c) => c.state === "admitting" && c.subscriber).length;
  if (held > BigInt(waiting)) {
    return [
      `${held} slots still held ${(8 * ttlMs) / 1000} s after every call ended and every fault healed ` +
        `(${waiting} requests still being admitted): ${await slotHolders(world)}`,
    ];
  }
  if (waiting > 0) return [];
  const calls = Array.from({ length: world.maxConcurrent }, () => world.subscriberCall(world.edges[0]!));
  // A request in a window's gap waits for the next window's room: the clock must move for it.
  for (let i = 0; i < 40 && calls.some((c) => c.state === "admitting"); i++) {
    await world.advance(50);
    await world.settle();
  }
  const refused = calls.filter((c) => c.state !== "running");
  for (const call of calls) if (call.state === "running") await world.endCall(call);
  if (refused.length === 0) return [];
  const why = refused.map((c) => (c.refusal ? `${c.refusal.code}: ${c.refusal.message}` : c.state)).join(", ");
  return [
    `the subscriber's ${world.maxConcurrent} calls at once after a quiet point: ${refused.length} not admitted (${why})`,
  ];
}

/** Runs `steps` on a fresh world, checking every invariant after each; stops at the first failure. */
export async function runSteps(sim: SimBilling, steps: readonly Step[]): Promise<RunResult> {
  const world = await LeaseWorld.create(sim);
  const result: RunResult = {
    steps: 0,
    checks: 0,
    quietPoints: 0,
    calls: { admitted: 0, refused: {} },
    blamed: 0,
    blamedFor: {},
  };
  try {
    for (const [i, step] of steps.entries()) {
      await world.run(step);
      const violations = step.kind === "quiet" ? await quietPoint(world) : [];
      if (step.kind === "quiet") result.quietPoints += 1;
      violations.push(...(await checkInvariants(world)));
      result.steps = i + 1;
      result.checks += 6 + (step.kind === "quiet" ? 2 : 0);
      if (violations.length > 0) {
        result.failure = { step: i, violations };
        break;
      }
    }
  } finally {
    for (const call of world.calls) {
      if (call.state === "refused") {
        const code = call.refusal?.code ?? "unknown";
        result.calls.refused[code] = (result.calls.refused[code] ?? 0) + 1;
      } else if (call.state !== "admitting") result.calls.admitted += 1;
    }
    result.blamed = world.blamed;
    result.blamedFor = Object.fromEntries(world.blamedFor);
    await world.close();
  }
  return result;
}

/**
 * A shorter list of steps that still fails: the steps after the failing one go, then chunks of
 * the rest (halves, quarters, … single steps) are left out while the run still fails. Runs share
 * one billing, so each try costs only its steps. Stops after `budgetMs`.
 */
export async function shrink(
  sim: SimBilling,
  steps: readonly Step[],
  failingStep: number,
  budgetMs: number,
  progress: (line: string) => void = () => undefined,
): Promise<Step[]> {
  const until = performance.now() + budgetMs;
  let best = steps.slice(0, failingStep + 1);
  const first = await runSteps(sim, best);
  const kind = first.failure ? signature(first.failure.violations[0]!) : undefined;
  // A shorter case must fail the same way (another failure found on the way is not this one).
  const fails = async (candidate: Step[]) => {
    const failure = (await runSteps(sim, candidate)).failure;
    return failure !== undefined && (kind === undefined || failure.violations.some((v) => signature(v) === kind));
  };
  for (let chunk = Math.ceil(best.length / 2); chunk >= 1 && performance.now() < until;) {
    let removed = false;
    for (let start = 0; start < best.length && performance.now() < until;) {
      const candidate = [...best.slice(0, start), ...best.slice(start + chunk)];
      // A failure must still be a failure of a step: the last one is kept (it made the check fail).
      if (candidate.length > 0 && (await fails(candidate))) {
        best = candidate;
        removed = true;
        progress(`shrunk to ${best.length} steps`);
      } else start += chunk;
    }
    if (!removed) chunk = Math.floor(chunk / 2);
  }
  return best;
}

/** A violation without its ids and figures: what kind of failure it is. */
const signature = (violation: string) => violation.replace(/[0-9a-f-]{8,}|\d+/g, "#").slice(0, 60);

/** A case as lines to paste into a replay (test/simulation/replays.test.ts reads this shape). */
export function printCase(steps: readonly Step[]): string {
  return steps.map((s, i) => `  ${String(i + 1).padStart(3)}. ${describeStep(s)}`).join("\n");
}

export { generateSteps };
