import { spawn, type ChildProcess } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository's root, where every process's entry is resolved from. */
export const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
/** Node 24, pinned by the `node` dev dependency (the system's node may be older). */
export const NODE = join(root, "node_modules/.bin/node");

/** A child process running one of the system's `main.ts`, with the end of its output kept for failures. */
export interface Child {
  process: ChildProcess;
  exited: Promise<number | null>;
  output(): string;
}

/** Starts `entry` (a path from the root) with Node 24, at log level warn unless `env` says otherwise. */
export function startChild(entry: string, env: Record<string, string>): Child {
  const child = spawn(NODE, [join(root, entry)], {
    cwd: root,
    env: { ...process.env, LOG_LEVEL: "warn", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  const keep = (data: Buffer) => lines.push(...data.toString("utf8").split("\n").filter(Boolean));
  child.stdout!.on("data", keep);
  child.stderr!.on("data", keep);
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return { process: child, exited, output: () => lines.slice(-30).join("\n") };
}

/** Polls `url`/readyz until it answers 200; fails with the child's last output if it exits first. */
export async function waitForReady(url: string, child: Child, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.process.exitCode !== null) throw new Error(`exited early:\n${child.output()}`);
    const status = await fetch(`${url}/readyz`).then(
      (res) => res.status,
      () => 0,
    );
    if (status === 200) return;
    if (Date.now() > deadline) throw new Error(`not ready after ${timeoutMs} ms:\n${child.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
