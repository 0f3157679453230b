import { randomInt } from "node:crypto";
import { describe, it } from "vitest";
import { chaosSoak } from "./chaos-soak.ts";

// The chaos soak in CI (docs/testing.md, "The chaos soak"): 120 s of random kills and pauses of
// every process with a fresh seed each run, printed first so that a failure replays with
// `npm run chaos -- --seconds 120 --seed <seed>`. `npm run chaos` runs this file with its own
// length and seed (CHAOS_SECONDS, CHAOS_SEED).

const seconds = Number(process.env.CHAOS_SECONDS ?? 120);
const seed = process.env.CHAOS_SEED === undefined ? randomInt(2 ** 31) : Number(process.env.CHAOS_SEED);
console.log(`chaos seed ${seed}: replay with npm run chaos -- --seconds ${seconds} --seed ${seed}`);

describe("the chaos soak", () => {
  it(
    `keeps every money invariant through ${seconds} s of kills and pauses (seed ${seed})`,
    // The system's start (nine processes on 2 cores), the faults, the calm after them and the
    // checks' waits for settlement and lease releases. No retry: a retry would replay the same
    // seed and double the run; a failure must be seen.
    { timeout: seconds * 1_000 + 300_000, retry: 0 },
    async () => {
      await chaosSoak({ seconds, seed, log: (line) => console.log(`[chaos ${seed}] ${line}`) });
    },
  );
});
