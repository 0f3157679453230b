import { afterAll, beforeAll, expect, it } from "vitest";
import { INVARIANTS, QUIET_INVARIANTS } from "./lease-invariants.ts";
import { generateSteps, printCase, runSteps, shrink } from "./run-simulation.ts";
import { SimBilling } from "./sim-billing.ts";

/**
 * The lease protocol simulated (docs/leases.md#the-protocol-simulated): three edges' lease tables
 * against a real billing and PostgreSQL through a faulty wire, every invariant checked after
 * every step. A fresh seed each run (SIM_SEED replays one); a failure prints the seed and a shrunk
 * case, which `npm run simulate -- --replay '<json>'` runs again.
 */
const STEPS = Number(process.env.SIM_STEPS ?? 1200);
const SEED = Number(process.env.SIM_SEED ?? Math.floor(Math.random() * 2 ** 31));
let sim: SimBilling;

beforeAll(async () => {
  sim = await SimBilling.start();
});
afterAll(async () => {
  await sim?.close();
});

it(`holds every invariant for ${STEPS} steps (seed ${SEED})`, { timeout: 240_000 }, async () => {
  const steps = generateSteps(SEED, STEPS);
  const result = await runSteps(sim, steps);
  console.log(
    `lease simulation: seed ${SEED}, ${result.steps} steps, ${result.checks} invariant checks ` +
      `(${INVARIANTS.length} after each step, ${QUIET_INVARIANTS.length} at ${result.quietPoints} quiet points); ` +
      `admitted ${result.calls.admitted}, refused ${JSON.stringify(result.calls.refused)}`,
  );
  if (result.failure) {
    const shrunk = await shrink(sim, steps, result.failure.step, 60_000);
    expect.fail(
      `seed ${SEED} failed at step ${result.failure.step + 1}: ${result.failure.violations.join("; ")}\n` +
        `shrunk case (${shrunk.length} steps):\n${printCase(shrunk)}\n` +
        `replay: npm run simulate -- --replay '${JSON.stringify(shrunk)}'`,
    );
  }
  expect(result.steps).toBe(STEPS);
});
