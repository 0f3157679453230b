/**
 * The lease protocol simulation, for as long as you like (docs/leases.md#the-protocol-simulated):
 *
 *   npm run simulate -- --steps 20000 --seed 12345
 *   npm run simulate -- --steps 2000 --side-by-side     # takeovers may leave two processes running
 *   npm run simulate -- --replay '[{"seed":1,"kind":"subscriberCall","edge":0}, …]'
 *
 * Several edges' lease tables against a real billing and PostgreSQL (DATABASE_URL's server, a
 * database of its own) and NATS (NATS_URL), the wire between them dropping, delaying, duplicating
 * and reordering lease calls and replies. Prints the seed, the steps run and the invariants
 * checked; on a failure, the violation, then a shrunk case of the steps that still fail, and exits 1.
 */
import { parseArgs } from "node:util";
import { INVARIANTS, QUIET_INVARIANTS } from "../test/simulation/lease-invariants.ts";
import { generateSteps, printCase, runSteps, shrink } from "../test/simulation/run-simulation.ts";
import type { Step } from "../test/simulation/lease-steps.ts";
import { SimBilling } from "../test/simulation/sim-billing.ts";

const { values } = parseArgs({
  options: {
    steps: { type: "string", default: "5000" },
    seed: { type: "string" },
    "shrink-seconds": { type: "string", default: "300" },
    /** A shrunk case's JSON (as a failure prints it), run instead of generated steps. */
    replay: { type: "string" },
    /** Half the takeovers leave both processes running side by side (an open finding: see docs). */
    "side-by-side": { type: "boolean", default: false },
  },
});
const seed = values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(values.seed);
const count = Number(values.steps);
if (!Number.isSafeInteger(seed) || !Number.isSafeInteger(count) || count < 1) {
  console.error("usage: npm run simulate -- [--steps N] [--seed S] [--shrink-seconds T] [--side-by-side]");
  process.exit(2);
}

const sideBySide = values["side-by-side"];
const rerun = `npm run simulate -- --steps ${count} --seed ${seed}${sideBySide ? " --side-by-side" : ""}`;
console.log(`lease simulation: seed ${seed}, ${count} steps (replay: ${rerun})`);
const sim = await SimBilling.start();
let failed = false;
try {
  const started = performance.now();
  const steps = values.replay ? (JSON.parse(values.replay) as Step[]) : generateSteps(seed, count, { sideBySide });
  const result = await runSteps(sim, steps);
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  console.log(
    `${result.steps} steps in ${seconds} s, ${result.checks} invariant checks, ${result.quietPoints} quiet points; ` +
      `calls admitted ${result.calls.admitted}, refused ${JSON.stringify(result.calls.refused)}; ` +
      `subscriber 429s with fewer than max_concurrent running: ${result.blamed}`,
  );
  for (const [reason, n] of Object.entries(result.blamedFor)) console.log(`  ${n} × ${reason}`);
  console.log(`invariants, after every step:\n${INVARIANTS.map((i) => `  - ${i}`).join("\n")}`);
  console.log(`at each quiet point:\n${QUIET_INVARIANTS.map((i) => `  - ${i}`).join("\n")}`);
  if (result.failure) {
    failed = true;
    console.log(`\nFAILED at step ${result.failure.step + 1} (seed ${seed}):`);
    for (const v of result.failure.violations) console.log(`  ${v}`);
    console.log(`\nshrinking (at most ${values["shrink-seconds"]} s)…`);
    const shrunk = await shrink(sim, steps, result.failure.step, Number(values["shrink-seconds"]) * 1000, (line) =>
      console.log(`  ${line}`),
    );
    const again = await runSteps(sim, shrunk);
    console.log(`\nshrunk case (${shrunk.length} steps), replayable with replaySteps():\n${printCase(shrunk)}`);
    console.log(
      `its failure: ${again.failure?.violations.join("; ") ?? "did not fail again (a race: run the seed again)"}`,
    );
    console.log(`\nas JSON:\n${JSON.stringify(shrunk)}`);
  }
} finally {
  await sim.close();
}
process.exit(failed ? 1 : 0);
