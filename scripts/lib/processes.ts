import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

export interface ProcessSpec {
  name: string;
  entry: string;
  env: Record<string, string>;
}

export interface StartOptions {
  /** Where the <name>.log files go; default <root>/logs. */
  logDir?: string;
}

export interface Supervisor {
  children: Map<string, ChildProcess>;
  /** Resolves when every child has exited, after SIGTERM. */
  stopAll(): Promise<void>;
}

/**
 * The memory settings every process of the system runs with, here and in the image
 * (deploy/Dockerfile sets the same values; test/deploy checks they agree). docs/decisions.md,
 * "Memory of the processes", has the measurements.
 */
export const PROCESS_ENV = {
  // Under a high allocation rate V8 grows each young-generation semi-space up to 64 MiB and keeps
  // it: ~130 MiB of RSS in the edge and the registry for a heap of ~30 MiB. 16 MiB keeps the cost
  // of a minor GC low and the young generation three times smaller.
  NODE_OPTIONS: "--max-semi-space-size=16",
  // glibc raises its mmap threshold to the largest block freed (up to 32 MiB), so after the first
  // password hash (scrypt takes 16 MiB) those blocks come from arenas that are never given back:
  // ~70 MiB kept by accounts after a burst of sign-ups. A fixed threshold returns them.
  MALLOC_MMAP_THRESHOLD_: "131072",
} as const;

/** The child's environment: the launcher's, PROCESS_ENV (NODE_OPTIONS appended to), the spec's. */
function childEnv(spec: ProcessSpec): NodeJS.ProcessEnv {
  const nodeOptions = [PROCESS_ENV.NODE_OPTIONS, process.env.NODE_OPTIONS].filter(Boolean).join(" ");
  return { ...process.env, ...PROCESS_ENV, NODE_OPTIONS: nodeOptions, ...spec.env };
}

/**
 * Starts each process with the same Node binary as the launcher (Node 24, pinned by the `node`
 * dev dependency), its output appended to logs/<name>.log (options.logDir: another directory).
 * When one exits unexpectedly the launcher reports it with the end of its log and stops the rest:
 * a half-started system is worse than none.
 */
export function startProcesses(
  root: string,
  specs: ProcessSpec[],
  onCrash: (name: string, tail: string) => void,
  options: StartOptions = {},
): Supervisor {
  const logDir = options.logDir ?? join(root, "logs");
  mkdirSync(logDir, { recursive: true });
  const children = new Map<string, ChildProcess>();
  let stopping = false;
  for (const spec of specs) {
    const logPath = join(logDir, `${spec.name}.log`);
    const log = createWriteStream(logPath, { flags: "a" });
    const child = spawn(process.execPath, [join(root, spec.entry)], {
      cwd: root,
      env: childEnv(spec),
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout!.pipe(log);
    child.stderr!.pipe(log);
    child.on("exit", (code, signal) => {
      children.delete(spec.name);
      if (stopping) return;
      const tail = readFileSync(logPath, "utf8").split("\n").slice(-15).join("\n");
      onCrash(`${spec.name} exited (${signal ?? code})`, tail);
    });
    children.set(spec.name, child);
  }
  return {
    children,
    async stopAll() {
      stopping = true;
      const exits = [...children.values()].map(
        (child) =>
          new Promise<void>((resolve) => (child.exitCode !== null ? resolve() : child.once("exit", () => resolve()))),
      );
      // Edge first, so no new requests arrive while the backends drain.
      for (const name of ["edge", "registry", "billing", "accounts", "local-model"])
        children.get(name)?.kill("SIGTERM");
      await Promise.race([Promise.all(exits), new Promise((r) => setTimeout(r, 20_000))]);
      for (const child of children.values()) child.kill("SIGKILL");
    },
  };
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
