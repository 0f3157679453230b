import { readdirSync, readFileSync, readlinkSync } from "node:fs";

/**
 * The process listening on loopback TCP `port`, found from the kernel's socket table (its inode)
 * and the processes' open descriptors: the chaos run started every process it pauses on a port of
 * its own choosing, but not all of them through a handle that knows the process id (the private
 * nats-server, PostgreSQL's postmaster). Undefined when nothing listens there (stopped, restarting).
 */
export function pidListeningOn(port: number): number | undefined {
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(table, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      // local_address is hex ip:port; state 0A is LISTEN; the inode is the tenth field.
      if (fields.length < 10 || fields[3] !== "0A") continue;
      if (Number.parseInt(fields[1]!.split(":")[1]!, 16) === port) inodes.add(`socket:[${fields[9]}]`);
    }
  }
  if (inodes.size === 0) return undefined;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        if (inodes.has(readlinkSync(`/proc/${entry}/fd/${fd}`))) return Number(entry);
      } catch {
        // closed meanwhile
      }
    }
  }
  return undefined;
}

/** `pid` and every process under it (PostgreSQL's backends under its postmaster), parents first. */
export function processTree(pid: number): number[] {
  const tree = [pid];
  for (let i = 0; i < tree.length; i++) {
    const parent = tree[i]!;
    let children = "";
    try {
      for (const task of readdirSync(`/proc/${parent}/task`)) {
        children += ` ${readFileSync(`/proc/${parent}/task/${task}/children`, "utf8")}`;
      }
    } catch {
      continue; // gone meanwhile
    }
    for (const child of children.trim().split(/\s+/).filter(Boolean)) tree.push(Number(child));
  }
  return tree;
}

/** Sends `signal` to each pid, ignoring those that have exited meanwhile. */
export function signalAll(pids: readonly number[], signal: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
    } catch {
      // exited
    }
  }
}
