/**
 * The chaos soak as a tool (docs/testing.md, "The chaos soak"):
 *
 *   npm run chaos -- --seconds 600 --seed 12345
 *
 * starts the whole system as separate processes with two edges, sends traffic on platform,
 * subscription and open-plan keys, kills and pauses every process by a schedule drawn from the
 * seed (a fresh one when none is given), and checks the money invariants at the end. The seed is
 * printed first: the same seed replays the same faults. Exits non-zero when an invariant failed.
 */
import { spawn } from "node:child_process";
import { randomInt } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

const { values } = parseArgs({
  options: { seconds: { type: "string", default: "120" }, seed: { type: "string" } },
});
const seconds = Number(values.seconds);
const seed = values.seed === undefined ? randomInt(2 ** 31) : Number(values.seed);
if (!Number.isInteger(seconds) || seconds < 1 || !Number.isInteger(seed) || seed < 0) {
  console.error("usage: npm run chaos -- [--seconds N] [--seed S]  (N ≥ 1, S a non-negative integer)");
  process.exit(2);
}
console.log(`chaos seed ${seed}, ${seconds} s`);

// The soak's checks are the fault tests' own (test/faults/fault-checks.ts, on vitest's expect):
// the tool runs the soak's test file with its length and seed, on this Node (24: the processes it
// starts run TypeScript), not whichever `node` the vitest launcher's shebang finds first.
const run = spawn(process.execPath, [join(root, "node_modules/vitest/vitest.mjs"), "run", "test/chaos/chaos.test.ts"], {
  cwd: root,
  stdio: "inherit",
  env: { ...process.env, CHAOS_SECONDS: String(seconds), CHAOS_SEED: String(seed) },
});
run.once("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
