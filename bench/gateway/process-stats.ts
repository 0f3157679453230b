/**
 * What each process spent during a run, read from /proc: CPU time (user + system, from
 * /proc/<pid>/stat), write system calls (/proc/<pid>/io `syscw`) and voluntary context switches
 * of its main thread (/proc/<pid>/status: how often it went to sleep waiting for something).
 * Divided by the requests of the run they say where a request's cost goes; on a VM every message
 * to a sleeping process costs its sender a wake-up, so writes and sleeps matter as much as CPU.
 * PostgreSQL and NATS are the machine's shared servers: all their processes are summed (the
 * machine is otherwise idle during a bench).
 */
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

const TICKS_PER_SECOND = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;

/** The bench process's own share: the load generator, not part of any target. */
export const LOAD_GENERATOR = "load generator";

export interface Counters {
  cpuMs: number;
  writes: number;
  sleeps: number;
}

const ZERO: Counters = { cpuMs: 0, writes: 0, sleeps: 0 };

const field = (text: string, name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, "m").exec(text)?.[1] ?? NaN);

/** A numeric field of /proc/<pid>/status (`VmRSS` and `VmHWM` are in kB); NaN when the process is gone. */
export function statusField(pid: number, name: string): number {
  try {
    return field(readFileSync(`/proc/${pid}/status`, "utf8"), name);
  } catch {
    return NaN;
  }
}

/** A process's counters so far (undefined when it is gone). */
function countersOf(pid: number | "self"): Counters | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name may hold spaces and parentheses: fields are counted after its last ")".
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return {
      cpuMs: ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND,
      writes: field(readFileSync(`/proc/${pid}/io`, "utf8"), "syscw"),
      sleeps: field(readFileSync(`/proc/${pid}/status`, "utf8"), "voluntary_ctxt_switches"),
    };
  } catch {
    return undefined;
  }
}

/** The ids of every process whose command name is `comm` (postgres backends, nats-server). */
export function pidsNamed(comm: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, "utf8").trim() === comm) pids.push(Number(entry));
    } catch {
      // exited while we looked
    }
  }
  return pids;
}

/** Process groups to measure: a name and the pids whose counters are summed under it. */
export type ProcessGroups = Record<string, () => number[]>;

function snapshot(groups: ProcessGroups): Map<string, Map<number | "self", Counters>> {
  const out = new Map<string, Map<number | "self", Counters>>();
  for (const [name, pids] of Object.entries(groups)) {
    const counters = new Map<number | "self", Counters>();
    for (const pid of pids()) {
      const c = countersOf(pid);
      if (c) counters.set(pid, c);
    }
    out.set(name, counters);
  }
  out.set(LOAD_GENERATOR, new Map([["self", countersOf("self") ?? ZERO]]));
  return out;
}

/**
 * Starts measuring; `stop()` returns each group's counters since, the bench process (the load
 * generator) included. A process that started during the run counts from zero; one that exited
 * during it is not counted (pooled connections and our services live for the whole run).
 */
export function measureProcesses(groups: ProcessGroups): { stop(): Record<string, Counters> } {
  const before = snapshot(groups);
  return {
    stop() {
      const after = snapshot(groups);
      const spent: Record<string, Counters> = {};
      for (const [name, pids] of after) {
        const total = { ...ZERO };
        for (const [pid, end] of pids) {
          const start = before.get(name)?.get(pid) ?? ZERO;
          total.cpuMs += end.cpuMs - start.cpuMs;
          total.writes += end.writes - start.writes;
          total.sleeps += end.sleeps - start.sleeps;
        }
        spent[name] = total;
      }
      return spent;
    },
  };
}

/** Each group's counters divided by `requests`. */
export function perRequest(spent: Record<string, Counters>, requests: number): Record<string, Counters> {
  const n = Math.max(1, requests);
  return Object.fromEntries(
    Object.entries(spent).map(([name, c]) => [
      name,
      { cpuMs: c.cpuMs / n, writes: c.writes / n, sleeps: c.sleeps / n },
    ]),
  );
}

/** The processes serving the target added up (the load generator left out). */
export function served(stats: Record<string, Counters>): Counters {
  const total = { ...ZERO };
  for (const [name, c] of Object.entries(stats)) {
    if (name === LOAD_GENERATOR) continue;
    total.cpuMs += c.cpuMs;
    total.writes += c.writes;
    total.sleeps += c.sleeps;
  }
  return total;
}
