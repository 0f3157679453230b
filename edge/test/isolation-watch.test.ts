import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { createLogger } from "@mkt/runtime/logger";
import { answerCutoff, IsolationWatch } from "../src/leases/isolation-watch.ts";

const log = createLogger("isolation-test", "silent");

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

function watch() {
  return new IsolationWatch({ isolationMs: 60_000, log, now: () => Date.now() });
}

describe("the edge's isolation watch", () => {
  it("aborts once no call sent in EDGE_ISOLATION_MS was answered, and not before", () => {
    const isolation = watch();
    vi.advanceTimersByTime(30_000);
    isolation.contact(Date.now() - 1_000); // a reply to a call sent a second ago
    vi.advanceTimersByTime(58_999);
    expect(isolation.signal.aborted).toBe(false);
    vi.advanceTimersByTime(1);
    expect(isolation.signal.aborted).toBe(true);
    expect(isolation.signal.reason).toBeInstanceOf(AppError);
    expect((isolation.signal.reason as AppError).code).toBe("service_unavailable");
  });

  it("gives a fresh signal once billing answers again; answers relayed under it and shutdown end with either", () => {
    const isolation = watch();
    const shutdown = new AbortController();
    const before = answerCutoff(shutdown.signal, isolation);
    vi.advanceTimersByTime(60_000);
    expect(before.aborted).toBe(true);
    isolation.contact(Date.now());
    expect(isolation.signal.aborted).toBe(false);
    const after = answerCutoff(shutdown.signal, isolation);
    shutdown.abort();
    expect(after.aborted).toBe(true);
  });

  it("stays aborted for good once ended (the edge was superseded)", () => {
    const isolation = watch();
    isolation.end(new AppError("service_unavailable", "replaced"));
    isolation.contact(Date.now() + 1);
    expect(isolation.signal.aborted).toBe(true);
  });
});
