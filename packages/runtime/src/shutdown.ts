import type { Logger } from "./logger.ts";
import { flushTraces } from "./trace-context.ts";

/**
 * Runs `steps` in order once, on SIGTERM or SIGINT (readiness off → stop accepting → drain →
 * nats.drain() → orm.close()). A step that fails is logged and the next still runs; the process
 * exits when all are done or after `deadlineMs`.
 */
export function onShutdown(
  log: Logger,
  steps: Array<[string, () => Promise<unknown> | unknown]>,
  deadlineMs = 30_000,
): void {
  let started = false;
  const run = async (signal: string) => {
    if (started) return;
    started = true;
    log.info({ signal }, "shutting down");
    const timer = setTimeout(() => {
      log.error("shutdown deadline passed; exiting");
      process.exit(1);
    }, deadlineMs);
    timer.unref();
    for (const [name, step] of steps) {
      try {
        await step();
      } catch (err) {
        log.error({ err, step: name }, "shutdown step failed");
      }
    }
    log.info("shutdown complete");
    // The last requests' spans are still in the exporter's batch; process.exit would drop them.
    await flushTraces();
    process.exit(0);
  };
  process.once("SIGTERM", () => void run("SIGTERM"));
  process.once("SIGINT", () => void run("SIGINT"));
}
