import type { Micros } from "@mkt/runtime/money";
import type { SettleOutcome } from "../settlement/usage-without-charge.ts";
import type { BillingMetrics } from "./billing-metrics.ts";

/**
 * Counts one committed settlement transaction: its outcomes, each event's lag from its JetStream
 * publish time (nanoseconds since the epoch, the server's clock) to now, and its write-offs.
 * The lag uses the wall clock, never billing's test clock: it measures real waiting.
 */
export function recordSettlement(
  metrics: BillingMetrics,
  outcomes: readonly SettleOutcome[],
  publishedNanos: readonly number[],
  writtenOff: readonly Micros[],
): void {
  for (const outcome of outcomes) metrics.settled.inc({ outcome });
  const nowMs = Date.now();
  for (const nanos of publishedNanos) {
    // A number of nanoseconds (msg.info.timestampNanos) is exact to ~0.3 µs, plenty here. A server
    // clock ahead of ours would give a negative lag; it is at least zero.
    metrics.settlementLag.observe(Math.max(0, nowMs - nanos / 1e6) / 1_000);
  }
  for (const micros of writtenOff) {
    metrics.writeOffs.inc();
    // Counters are float64: exact up to 2^53 micro-USD (9 billion USD), far beyond one write-off.
    metrics.writeOffMicros.inc(Number(micros));
  }
}
