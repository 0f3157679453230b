import type { Logger } from "./logger.ts";

/** After a failed run, the next comes this soon, doubling up to the interval. */
const FIRST_RETRY_MS = 250;

/**
 * Runs `task` every `intervalMs` until the returned stop function is called. A run never overlaps
 * the previous one (a slow run makes the next tick skip), a failure is logged as `what failed`
 * and the loop goes on, and stop waits for a run in progress. The timer does not keep the
 * process alive.
 *
 * With `atStart`, the first run starts at once instead of one interval later.
 *
 * A failed run (its database was down) is tried again after 250 ms, doubling up to the interval,
 * rather than only at the next tick: a run that failed just as the database came back would
 * otherwise leave its work (leases due for release) for a whole interval more.
 */
export function repeatEvery(
  intervalMs: number,
  task: () => Promise<unknown>,
  log: Logger,
  what: string,
  options: { atStart?: boolean } = {},
): () => Promise<void> {
  let running: Promise<unknown> | undefined;
  let stopped = false;
  let retryMs = FIRST_RETRY_MS;
  let retry: NodeJS.Timeout | undefined;
  const run = () => {
    if (running || stopped) return;
    clearTimeout(retry);
    running = task()
      .then(
        () => {
          retryMs = FIRST_RETRY_MS;
        },
        (err: unknown) => {
          log.error({ err }, `${what} failed`);
          if (retryMs >= intervalMs || stopped) return;
          retry = setTimeout(run, retryMs);
          retry.unref();
          retryMs *= 2;
        },
      )
      .finally(() => (running = undefined));
  };
  const timer = setInterval(run, intervalMs);
  timer.unref();
  // A first run now rather than an interval from now (the overlap rule above applies to it too).
  if (options.atStart) run();
  return async () => {
    stopped = true;
    clearInterval(timer);
    clearTimeout(retry);
    await running;
  };
}
