import { describe, expect, it } from "vitest";
import { createLogger } from "../src/logger.ts";
import { repeatEvery } from "../src/periodic.ts";

const log = createLogger("test", "silent");
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("repeatEvery", () => {
  it("never overlaps runs, keeps going after a failure, and stop waits for the run in progress", async () => {
    let active = 0;
    let maxActive = 0;
    let runs = 0;
    let finished = 0;
    const stop = repeatEvery(
      5,
      async () => {
        runs++;
        active++;
        maxActive = Math.max(maxActive, active);
        await sleep(20); // four ticks' worth: the ticks in between must be skipped
        active--;
        finished++;
        if (runs === 1) throw new Error("first run fails");
      },
      log,
      "test task",
    );
    while (runs < 3) await sleep(5);
    await stop();
    expect(maxActive).toBe(1);
    expect(finished).toBe(runs); // stop returned only after the run it found had ended
    const after = runs;
    await sleep(30);
    expect(runs).toBe(after); // nothing runs after stop
  });

  it("tries a failed run again soon (250 ms, doubling) instead of a whole interval later", async () => {
    const at: number[] = [];
    const started = performance.now();
    const stop = repeatEvery(
      1_000,
      async () => {
        at.push(performance.now() - started);
        if (at.length < 3) throw new Error("database down");
      },
      log,
      "test task",
    );
    while (at.length < 3) await sleep(10);
    await stop();
    // The tick at 1 s, then retries 250 and 500 ms after each failure, well before the next tick.
    expect(at[1]! - at[0]!).toBeGreaterThanOrEqual(240);
    expect(at[2]! - at[1]!).toBeGreaterThanOrEqual(490);
    expect(at[2]!).toBeLessThan(1_950);
  });

  it("runs at once with atStart, then every interval, never overlapping the first run", async () => {
    const at: number[] = [];
    const started = performance.now();
    const stop = repeatEvery(
      200,
      async () => {
        at.push(performance.now() - started);
        await sleep(250); // longer than the interval: the first tick is skipped
      },
      log,
      "test task",
      { atStart: true },
    );
    while (at.length < 2) await sleep(10);
    await stop();
    expect(at[0]!).toBeLessThan(50);
    expect(at[1]!).toBeGreaterThanOrEqual(395); // the tick at 400 ms; the one at 200 found it running
  });
});
