import type { Logger } from "./logger.ts";

/**
 * Runs `task` every `intervalMs` until the returned stop function is called. A run never overlaps
 * the previous one (a slow run makes the next tick skip), a failure is logged as `what failed`
 * and the loop goes on, and stop waits for a run in progress. The timer does not keep the
 * process alive.
 */
export function repeatEvery(
  intervalMs: number,
  task: () => Promise<unknown>,
  log: Logger,
  what: string,
): () => Promise<void> {
  let running: Promise<unknown> | undefined;
  const timer = setInterval(() => {
    if (running) return;
    running = task()
      .catch((err: unknown) => log.error({ err }, `${what} failed`))
      .finally(() => (running = undefined));
  }, intervalMs);
  timer.unref();
  return async () => {
    clearInterval(timer);
    await running;
  };
}
