import type { ChildProcess } from "node:child_process";
import { Supervisor } from "./supervisor.ts";

export { PROCESS_ENV } from "./process-env.ts";

export interface ProcessSpec {
  name: string;
  entry: string;
  env: Record<string, string>;
}

export interface StartOptions {
  /** Where the <name>.log files go; default <root>/logs. */
  logDir?: string;
}

/** The processes one call of startProcesses started. */
export interface StartedProcesses {
  /** The running child of that name, if any. */
  child(name: string): ChildProcess | undefined;
  /** Stops them, the edge first (so no new requests arrive while the backends drain). */
  stopAll(): Promise<void>;
}

/**
 * Starts processes for a run that must not outlive a crash (the benchmarks): the Supervisor of
 * `npm start`, told to report a crashed child (`onCrash`, with the end of its log) rather than
 * restart it. Output is appended to logs/<name>.log (options.logDir: another directory).
 */
export function startProcesses(
  root: string,
  specs: ProcessSpec[],
  onCrash: (what: string, tail: string) => void,
  options: StartOptions = {},
): StartedProcesses {
  const supervisor = new Supervisor({
    root,
    logDir: options.logDir,
    stopOrder: [["edge"], ["registry"], ["billing", "accounts"], ["local-model"]],
    onCrash,
    report: () => {},
  });
  for (const spec of specs) supervisor.start(spec);
  return { child: (name) => supervisor.child(name), stopAll: () => supervisor.stop() };
}

/** Polls `url` until it answers 2xx or `timeoutMs` passes. */
export async function waitForHttp(url: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url);
      if (res.ok) return true;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return false;
}
