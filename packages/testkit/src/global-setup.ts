import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { dropStaleTestDatabases, TEST_NATS_URL } from "./env.ts";

/** The usage streams test files create (`freshEventsPrefix` → `T<10 hex>_USAGE`). */
const TEST_STREAM = /^T[0-9A-F]{10}_USAGE$/;

/**
 * Vitest global setup: each test file makes its own database and JetStream stream and leaves
 * them for inspection; this removes those older than an hour, so a machine running the suite
 * every day does not fill its disk.
 */
export default async function removeStaleTestState(): Promise<void> {
  await dropStaleTestDatabases();
  const nc = await connect({ servers: TEST_NATS_URL });
  try {
    const jsm = await jetstreamManager(nc);
    const cutoff = Date.now() - 3600_000;
    for await (const info of jsm.streams.list()) {
      if (TEST_STREAM.test(info.config.name) && Date.parse(info.created) < cutoff) {
        await jsm.streams.delete(info.config.name).catch(() => undefined);
      }
    }
  } finally {
    await nc.close();
  }
}
