import type { Faults } from "./faulty-wire.ts";
import { SeededRandom } from "./seeded-random.ts";
import { ISOLATION_CHOICES, TTL_CHOICES, type LeaseSettingsMs } from "./sim-billing.ts";

/**
 * One step of the simulation, with every choice it makes drawn already (and `seed` for the faults
 * its calls meet): a list of steps replays exactly, and a shorter list is a shrunk case.
 */
export type Step = { seed: number } & (
  | { kind: "advance"; ms: number }
  | { kind: "beat"; edge: number }
  | { kind: "call"; edge: number; account: number; outputTokens: number }
  | { kind: "subscriberCall"; edge: number }
  | { kind: "end"; pick: number; outputShare: number }
  | { kind: "deliver"; pick: number }
  | { kind: "lose"; pick: number }
  | { kind: "faults"; edge: number; faults: Faults }
  | { kind: "billingDown" }
  | { kind: "billingUp" }
  /** With `settings`, billing comes back with another LEASE_TTL_MS and EDGE_ISOLATION_MS. */
  | { kind: "billingRestart"; settings?: LeaseSettingsMs }
  | { kind: "crash"; edge: number }
  /**
   * A second process starts under the edge's id while the first still lives. With
   * `resumeAfterMs` the first was frozen (a paused process an orchestrator replaced) and resumes
   * that long after its TTL ran out; without it both run side by side from the start (a rolling
   * restart gone wrong). Both take traffic and beat until the next quiet point stops the first.
   */
  | { kind: "takeover"; edge: number; resumeAfterMs?: number }
  | { kind: "nats"; edge: number; mode: NatsMode }
  | { kind: "pause" }
  | { kind: "resume" }
  | { kind: "planEdit"; maxConcurrent: number }
  /** `edge` −1: billing's wall clock is stepped to `ms` from the simulation's time. */
  | { kind: "clockJump"; edge: number; ms: number }
  | { kind: "closer" }
  | { kind: "topUp"; account: number; micros: number }
  | { kind: "quiet" }
);

/** An edge's NATS: recalls answered, never received (paused), or acted on with the ack lost. */
export type NatsMode = "ok" | "paused" | "ackLost";

export const EDGES = 3;
export const ACCOUNTS = 2;
/** Steps between two quiet points (every fault healed, every call ended, every slot back). */
export const QUIET_EVERY = 150;

/** Choices of the mix beyond the default. */
export interface StepMix {
  /**
   * Half the takeovers leave both processes running side by side. Off by default: the old process
   * then admits on leases billing released, for up to a TTL (docs/leases.md#the-protocol-simulated,
   * lease-findings.test.ts), and every such run fails on it.
   */
  sideBySide?: boolean;
}

/** The steps of a run, from its seed: mostly traffic and time, with faults now and then. */
export function generateSteps(seed: number, count: number, mix: StepMix = {}): Step[] {
  const rng = new SeededRandom(seed);
  const steps: Step[] = [];
  const edge = () => rng.int(0, EDGES - 1);
  const rate = () => (rng.chance(0.5) ? 0 : rng.pick([0.05, 0.2, 0.5]));
  for (let i = 1; i <= count; i++) {
    const s = { seed: rng.int(1, 2 ** 31 - 1) };
    if (i % QUIET_EVERY === 0 || i === count) {
      steps.push({ ...s, kind: "quiet" });
      continue;
    }
    const r = rng.next() * 100;
    if (r < 18) steps.push({ ...s, kind: "advance", ms: rng.pick([1, 50, 200, 500, 1000, 2500]) });
    else if (r < 34) steps.push({ ...s, kind: "beat", edge: edge() });
    else if (r < 46)
      steps.push({
        ...s,
        kind: "call",
        edge: edge(),
        account: rng.int(0, ACCOUNTS - 1),
        outputTokens: rng.int(50, 3000),
      });
    else if (r < 58) steps.push({ ...s, kind: "subscriberCall", edge: edge() });
    else if (r < 74) steps.push({ ...s, kind: "end", pick: rng.int(0, 1000), outputShare: rng.next() });
    else if (r < 79) steps.push({ ...s, kind: "deliver", pick: rng.int(0, 1000) });
    else if (r < 80) steps.push({ ...s, kind: "lose", pick: rng.int(0, 1000) });
    else if (r < 84) {
      const faults = { dropCall: rate(), dropReply: rate(), delay: rate(), duplicate: rate() };
      steps.push({ ...s, kind: "faults", edge: edge(), faults });
    } else if (r < 85.5) steps.push({ ...s, kind: "billingDown" });
    else if (r < 87.5) steps.push({ ...s, kind: "billingUp" });
    else if (r < 87.8) steps.push({ ...s, kind: "billingRestart" });
    else if (r < 88.7) steps.push({ ...s, kind: "crash", edge: edge() });
    else if (r < 89) {
      const frozen = !mix.sideBySide || rng.chance(0.5);
      const resumeAfterMs = frozen ? { resumeAfterMs: rng.pick([0, 300, 1_000, 6_000]) } : {};
      steps.push({ ...s, kind: "takeover", edge: edge(), ...resumeAfterMs });
    } else if (r < 91)
      steps.push({ ...s, kind: "nats", edge: edge(), mode: rng.pick(["ok", "ok", "paused", "ackLost"]) });
    else if (r < 91.7) steps.push({ ...s, kind: "pause" });
    else if (r < 92.7) steps.push({ ...s, kind: "resume" });
    else if (r < 93.5) steps.push({ ...s, kind: "planEdit", maxConcurrent: rng.int(1, 4) });
    else if (r < 94.5) {
      const billing = rng.chance(0.5);
      const ms = billing ? rng.int(-500, 500) : rng.pick([300, 1_000, 2_500, 6_000]);
      steps.push({ ...s, kind: "clockJump", edge: billing ? -1 : edge(), ms });
    } else if (r < 97) steps.push({ ...s, kind: "closer" });
    else if (r < 97.3) steps.push({ ...s, kind: "billingRestart", settings: otherSettings(rng) });
    else steps.push({ ...s, kind: "topUp", account: rng.int(0, ACCOUNTS - 1), micros: rng.int(1000, 8000) });
  }
  return steps;
}

/** Lease settings billing would start with: a TTL, and an isolation bound above it (config.ts). */
function otherSettings(rng: SeededRandom): LeaseSettingsMs {
  const ttlMs = rng.pick(TTL_CHOICES);
  return { ttlMs, isolationMs: rng.pick(ISOLATION_CHOICES.filter((ms) => ms > ttlMs)) };
}

/** A step as one short line (a shrunk case prints as these). */
export function describeStep(step: Step): string {
  const { seed, kind, ...rest } = step;
  const args = Object.entries(rest)
    .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : String(v)}`)
    .join(" ");
  return `${kind}${args ? ` ${args}` : ""} (seed ${seed})`;
}
