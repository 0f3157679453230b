import pg from "pg";
import { randomBytes } from "node:crypto";
import { ensureDatabase } from "@mkt/runtime/db";

const BASE_DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/marketplace";
export const TEST_NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";

/**
 * A database of its own for one test file (`mkt_test_<random>`), created now; tests never share
 * state through Postgres. Old test databases are dropped by `dropStaleTestDatabases`. `server`
 * names another PostgreSQL (a test's private one) than the shared DATABASE_URL.
 */
export async function freshDatabaseUrl(server = BASE_DATABASE_URL): Promise<string> {
  const url = new URL(server);
  url.pathname = `/mkt_test_${Date.now().toString(36)}_${randomBytes(4).toString("hex")}`;
  await ensureDatabase(url.toString());
  return url.toString();
}

/** A NATS subject / stream prefix of its own for one test file. */
export function freshEventsPrefix(): string {
  return `t${randomBytes(5).toString("hex")}.`;
}

/** Drops the database `url` names (a test's or a benchmark's own), closing its connections. */
export async function dropDatabase(url: string): Promise<void> {
  const admin = new URL(url);
  admin.pathname = "/postgres";
  const name = decodeURIComponent(new URL(url).pathname.slice(1)).replaceAll('"', '""');
  const client = new pg.Client({ connectionString: admin.toString() });
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  } finally {
    await client.end();
  }
}

/**
 * Drops test databases left by earlier runs (older than an hour), then the roles made for them
 * (`freshServiceDatabases`: named after their database, so as old).
 */
export async function dropStaleTestDatabases(): Promise<void> {
  const admin = new URL(BASE_DATABASE_URL);
  admin.pathname = "/postgres";
  const client = new pg.Client({ connectionString: admin.toString() });
  await client.connect();
  try {
    const { rows } = await client.query<{ datname: string }>(
      "SELECT datname FROM pg_database WHERE datname LIKE 'mkt_test_%'",
    );
    const cutoff = Date.now() - 3600_000;
    const stale = (name: string) => {
      const created = parseInt(name.split("_")[2] ?? "", 36);
      return Number.isFinite(created) && created < cutoff;
    };
    for (const { datname } of rows.filter((row) => stale(row.datname))) {
      await client.query(`DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`).catch(() => undefined);
    }
    const roles = await client.query<{ rolname: string }>(
      "SELECT rolname FROM pg_roles WHERE rolname LIKE 'mkt_test_%'",
    );
    for (const { rolname } of roles.rows.filter((row) => stale(row.rolname))) {
      // Refused while the role still holds something elsewhere; a later run tries again.
      await client.query(`DROP ROLE IF EXISTS ${client.escapeIdentifier(rolname)}`).catch(() => undefined);
    }
  } finally {
    await client.end();
  }
}
