import { describe, expect, it } from "vitest";
import { createLogger } from "@mkt/runtime/logger";
import { startLeaseHeartbeat } from "../src/leases/lease-heartbeat.ts";
import type { LeaseTable } from "../src/leases/lease-table.ts";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A table whose beats take the given times in turn (then 0), recording when each started and ended. */
function beatsTaking(ttlMs: number, durationsMs: number[]) {
  const beats: Array<{ start: number; end?: number }> = [];
  const table = {
    ttlMs,
    beat: async () => {
      const beat: { start: number; end?: number } = { start: performance.now() };
      beats.push(beat);
      await sleep(durationsMs[beats.length - 1] ?? 0);
      beat.end = performance.now();
    },
  };
  return { table: table as unknown as LeaseTable, beats };
}

describe("the lease heartbeat's cadence", () => {
  it("beats every TTL / 2 from the previous send, and at once after a beat that took longer", async () => {
    // TTL 400: every 200 ms. The second beat takes 450 ms: a fixed timer's next tick would come
    // 150 ms after it ends.
    const { table, beats } = beatsTaking(400, [0, 450, 0, 0]);
    const stop = startLeaseHeartbeat(table, createLogger("heartbeat-test", "silent"));
    await sleep(1_050);
    await stop();
    const [first, slow, next, after] = beats;
    expect(slow!.start - first!.start).toBeGreaterThanOrEqual(195);
    expect(slow!.start - first!.start).toBeLessThan(350);
    // The overdue beat goes as the slow one ends, not at the next 200 ms tick.
    expect(next!.start - slow!.end!).toBeLessThan(100);
    // Then the interval again, counted from that send.
    expect(after!.start - next!.start).toBeGreaterThanOrEqual(195);
  });

  it("stop ends the loop at once, after the beat in flight", async () => {
    const { table, beats } = beatsTaking(10_000, [100]);
    const stop = startLeaseHeartbeat(table, createLogger("heartbeat-test", "silent"));
    const started = performance.now();
    await stop();
    expect(beats).toHaveLength(1);
    expect(beats[0]!.end).toBeDefined();
    expect(performance.now() - started).toBeLessThan(1_000);
    await sleep(50);
    expect(beats).toHaveLength(1);
  });
});
