import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { userInfo } from "node:os";
import { dirname, join } from "node:path";
import { randomBytes } from "node:crypto";
import {
  answers,
  findNatsServer,
  natsServerSyncsEveryWrite,
  natsServerVersion,
  SBIN,
} from "@mkt/testkit/local-servers";
import { renderNatsJetStreamBlock } from "@mkt/runtime/nats-server-config";
import type { SupervisedSpec } from "./supervisor.ts";

/**
 * The default addresses (docs/configuration.md#npm-start-the-launcher); `npm start` runs its own
 * only when nothing answers there.
 */
export const DEFAULT_POSTGRES = { host: "127.0.0.1", port: 5432 };
export const DEFAULT_NATS = { host: "127.0.0.1", port: 4222 };

/** What `npm start` uses for one dependency: a URL, and the process to run for it, if any. */
export interface Dependency {
  url: string;
  /** Set when `npm start` runs it itself (embedded); the supervisor starts it first, stops it last. */
  spec?: SupervisedSpec;
  /** One line for the console: where it comes from. */
  origin: string;
}

/**
 * PostgreSQL: DATABASE_URL when set; else the default address when something answers there;
 * else an embedded cluster (scripts/embedded-postgres.ts) on that port, its data in
 * `<dataDir>/postgres` and its password beside it, both kept across restarts.
 */
export async function postgresFor(env: NodeJS.ProcessEnv, dataDir: string): Promise<Dependency> {
  if (env.DATABASE_URL) return { url: env.DATABASE_URL, origin: "from DATABASE_URL" };
  const { host, port } = DEFAULT_POSTGRES;
  if (await answers(host, port))
    return { url: `postgres://postgres@${host}:${port}/marketplace`, origin: `${host}:${port} (already running)` };
  const home = join(dataDir, "postgres");
  mkdirSync(home, { recursive: true, mode: 0o755 });
  if (userInfo().uid === 0) assertReachableByOthers(home);
  // The password lives with the cluster it was set in: deleting the folder resets both.
  const passwordPath = join(home, "password");
  if (!existsSync(passwordPath)) writeFileSync(passwordPath, randomBytes(18).toString("hex"), { mode: 0o600 });
  const password = readFileSync(passwordPath, "utf8").trim();
  return {
    url: `postgres://postgres:${password}@${host}:${port}/marketplace`,
    origin: `embedded, ${host}:${port} (data in ${join(home, "data")})`,
    spec: {
      name: "postgres",
      command: process.execPath,
      args: ["scripts/embedded-postgres.ts"],
      env: {
        EMBEDDED_POSTGRES_DIR: join(home, "data"),
        EMBEDDED_POSTGRES_PORT: String(port),
        EMBEDDED_POSTGRES_PASSWORD: password,
      },
      stopTimeoutMs: 30_000,
    },
  };
}

/**
 * As root, the embedded server runs as the `postgres` system user, which must be able to walk
 * down to its data: a checkout under /root (mode 700) would fail deep inside initdb instead.
 */
function assertReachableByOthers(dir: string): void {
  for (let path = dir; ; path = dirname(path)) {
    if ((statSync(path).mode & 0o001) === 0) {
      throw new Error(
        `PostgreSQL is not running at 127.0.0.1:5432, and the embedded one would run as the postgres ` +
          `user, who cannot enter ${path}: allow it (chmod o+x ${path}), start PostgreSQL, or set DATABASE_URL.`,
      );
    }
    if (path === dirname(path)) return;
  }
}

export const NATS_HINT =
  "NATS is not running at 127.0.0.1:4222 and nats-server is not installed: install it " +
  "(Debian/Ubuntu: apt-get install nats-server; macOS: brew install nats-server) or run " +
  "`docker compose --profile dev up -d nats-dev`, or set NATS_URL.";

/**
 * NATS: NATS_URL when set; else the default address when something answers there; else a
 * nats-server on that port with JetStream, its store in `<dataDir>/nats`, from a configuration
 * file rendered beside it (`<dataDir>/nats-server.conf`): syncing every write to disk before its
 * ack needs a file, there is no flag for it (nats-server 2.10 and later; an older one runs without,
 * and the console line says so); else an error whose message is one line saying how to get one.
 */
export async function natsFor(
  env: NodeJS.ProcessEnv,
  dataDir: string,
  // Tests only: an address where nothing listens, and no sbin fallback, to see the hint.
  { address = DEFAULT_NATS, sbin = SBIN } = {},
): Promise<Dependency> {
  if (env.NATS_URL) return { url: env.NATS_URL, origin: "from NATS_URL" };
  const { host, port } = address;
  const url = `nats://${host}:${port}`;
  if (await answers(host, port)) return { url, origin: `${host}:${port} (already running)` };
  const server = findNatsServer(env.PATH, sbin);
  if (!server) throw new Error(NATS_HINT);
  const store = join(dataDir, "nats");
  mkdirSync(store, { recursive: true });
  const syncEveryWrite = natsServerSyncsEveryWrite(server);
  // Beside the store, not in it: the server owns what is under its store directory.
  const configPath = join(dataDir, "nats-server.conf");
  writeFileSync(configPath, renderNatsJetStreamBlock({ storeDir: store, syncEveryWrite }));
  const sync = syncEveryWrite
    ? "every write synced to disk"
    : `nats-server ${natsServerVersion(server) ?? "(unknown version)"} cannot sync every write: 2.10+ can`;
  return {
    url,
    origin: `${server}, ${host}:${port} (JetStream store in ${store}; ${sync})`,
    spec: { name: "nats", command: server, args: ["-c", configPath, "-a", host, "-p", String(port)], env: {} },
  };
}
