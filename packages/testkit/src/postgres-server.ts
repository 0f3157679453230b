import { execFile, execFileSync } from "node:child_process";
import { chownSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { answers } from "./local-servers.ts";
import { freePort } from "./ports.ts";

const run = promisify(execFile);

/** Debian's PostgreSQL 15 package; PG_BIN_DIR names another installation. */
const BIN_DIR = process.env.PG_BIN_DIR ?? "/usr/lib/postgresql/15/bin";

/** A PostgreSQL cluster of a test's own: stop and start it at will, never the machine's shared one. */
export interface PrivatePostgres {
  /** postgres://postgres@127.0.0.1:<port>/postgres (trust authentication, loopback only). */
  url: string;
  port: number;
  /**
   * Stops the server: `fast` (the default) ends every session as an operator's restart does;
   * `immediate` is a crash (no checkpoint; the next start replays the WAL).
   */
  stop(mode?: "fast" | "immediate"): Promise<void>;
  /** Starts it again on the same port and data, and waits until it accepts connections. */
  start(): Promise<void>;
  /** Stops it and removes its data. */
  close(): Promise<void>;
}

/**
 * The command line that runs `binary` as the `postgres` system user when this process is root
 * (initdb and postgres refuse root), or as this user otherwise.
 */
function asPostgres(binary: string, args: string[]): [string, string[]] {
  const path = join(BIN_DIR, binary);
  return userInfo().uid === 0 ? ["runuser", ["-u", "postgres", "--", path, ...args]] : [path, args];
}

/**
 * Initialises a PostgreSQL cluster in a temporary directory and starts it on a free loopback
 * port (its socket in that directory too, away from the system's), for fault tests that stop the
 * database under a running system. fsync is off: the data is thrown away at the end,
 * and a test's crash (`stop("immediate")`) still replays the WAL the server wrote.
 */
export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const port = await freePort();
  const home = mkdtempSync(join(tmpdir(), "mkt-pg-"));
  const data = join(home, "data");
  if (userInfo().uid === 0) {
    const uid = Number(execFileSync("id", ["-u", "postgres"]).toString().trim());
    const gid = Number(execFileSync("id", ["-g", "postgres"]).toString().trim());
    chownSync(home, uid, gid);
  }
  const pgCtl = (...args: string[]) => asPostgres("pg_ctl", ["-D", data, ...args]);
  {
    const [command, args] = asPostgres("initdb", ["-D", data, "-U", "postgres", "-A", "trust", "--no-sync"]);
    await run(command, args);
  }
  const options = `-p ${port} -k ${home} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`;

  async function start(): Promise<void> {
    if (await answers("127.0.0.1", port)) return;
    const [command, args] = pgCtl("-o", options, "-l", join(home, "log"), "-w", "-t", "30", "start");
    await run(command, args);
    const deadline = Date.now() + 10_000;
    while (!(await answers("127.0.0.1", port))) {
      if (Date.now() > deadline) throw new Error(`private PostgreSQL did not start on port ${port}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  async function stop(mode: "fast" | "immediate" = "fast"): Promise<void> {
    const [command, args] = pgCtl("-m", mode, "-w", "-t", "30", "stop");
    // Stopping a stopped server is not an error here: close() after a test that left it down.
    await run(command, args).catch((err: { stderr?: string }) => {
      if (!/Is server running\?/.test(err.stderr ?? "")) throw err;
    });
  }

  // pg_ctl's server outlives this process: a test process that dies without close() stops it.
  const stopOnExit = () => {
    const [command, args] = pgCtl("-m", "immediate", "stop");
    try {
      execFileSync(command, args, { stdio: "ignore" });
    } catch {
      // not running
    }
  };
  process.once("exit", stopOnExit);
  await start();
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    stop,
    start,
    async close() {
      process.off("exit", stopOnExit);
      await stop("immediate");
      rmSync(home, { recursive: true, force: true });
    },
  };
}
