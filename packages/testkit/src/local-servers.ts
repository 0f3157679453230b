import { execFileSync } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { connect } from "node:net";
import { delimiter, join } from "node:path";

// Finding local servers, shared by the tests (their private PostgreSQL and nats-server) and by
// `npm start` (scripts/lib/local-infra.ts), which imports it from here so that the arrow between
// the two runs from scripts down to this package, never up.

/** True when something accepts a TCP connection at host:port within `timeoutMs`. */
export function answers(host: string, port: number, timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: timeoutMs });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once("connect", () => done(true));
    socket.once("timeout", () => done(false));
    socket.once("error", () => done(false));
  });
}

/** Where Debian and others install nats-server: sbin, which a non-root user's PATH often lacks. */
export const SBIN = ["/usr/sbin", "/usr/local/sbin"];

/** The nats-server executable on PATH (or in sbin), if any. */
export function findNatsServer(path = process.env.PATH ?? "", sbin = SBIN): string | undefined {
  for (const dir of [...path.split(delimiter).filter(Boolean), ...sbin]) {
    const candidate = join(dir, "nats-server");
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not there
    }
  }
  return undefined;
}

/** The version a nats-server binary reports (`nats-server --version` prints `nats-server: v2.9.10`). */
export function natsServerVersion(binary: string): string | undefined {
  try {
    return /v(\d+\.\d+\.\d+)/.exec(execFileSync(binary, ["--version"], { encoding: "utf8", timeout: 5_000 }))?.[1];
  } catch {
    return undefined;
  }
}

/**
 * True when the binary understands `sync_interval: always` (nats-server 2.10 and later): an older
 * server refuses a configuration file that names it, so the file leaves it out there.
 */
export function natsServerSyncsEveryWrite(binary: string): boolean {
  const [major = 0, minor = 0] = (natsServerVersion(binary) ?? "0.0.0").split(".").map(Number);
  return major > 2 || (major === 2 && minor >= 10);
}
