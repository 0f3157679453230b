import pg from "pg";
import { MikroORM, type EntitySchema, type MigrationObject } from "@mikro-orm/core";
import { PostgreSqlDriver } from "@mikro-orm/postgresql";
import { Migrator } from "@mikro-orm/migrations";
import type { Logger } from "./logger.ts";

export type Orm = MikroORM<PostgreSqlDriver>;

export interface DatabaseOptions {
  url: string;
  /** The service's own Postgres schema (DESIGN.md §1: one schema per service). */
  schema: string;
  entities: EntitySchema[];
  migrations: MigrationObject[];
  migrate: boolean;
  poolMax?: number;
  log: Logger;
}

/**
 * Opens the service's database: creates the database and schema when missing and applies
 * committed migrations under an advisory lock, so replicas starting together migrate once.
 */
export async function openDatabase(options: DatabaseOptions): Promise<Orm> {
  if (options.migrate) await ensureDatabase(options.url, options.log);
  const orm = await MikroORM.init<PostgreSqlDriver>({
    driver: PostgreSqlDriver,
    clientUrl: options.url,
    // Raw SQL (hot paths) names tables without a schema: the service's schema is the search path.
    driverOptions: { options: `-c search_path=${options.schema}` },
    schema: options.schema,
    entities: options.entities,
    extensions: [Migrator],
    migrations: {
      migrationsList: options.migrations,
      schema: options.schema,
      snapshot: false,
      transactional: true,
      silent: true,
    },
    pool: { min: 0, max: options.poolMax ?? 10 },
    forceUtcTimezone: true,
    debug: false,
  });
  if (options.migrate) await migrate(orm, options);
  return orm;
}

async function migrate(orm: Orm, options: DatabaseOptions): Promise<void> {
  const lock = new pg.Client({ connectionString: options.url });
  await lock.connect();
  try {
    await lock.query("SELECT pg_advisory_lock(hashtext($1))", [`mkt-migrate:${options.schema}`]);
    await lock.query(`CREATE SCHEMA IF NOT EXISTS "${options.schema}"`);
    const applied = await orm.migrator.up();
    if (applied.length > 0) options.log.info({ migrations: applied.map((m) => m.name) }, "migrations applied");
  } finally {
    await lock.end();
  }
}

/** Creates the database named in `url` when it does not exist yet. */
export async function ensureDatabase(url: string, log?: Logger): Promise<void> {
  const target = new URL(url);
  const name = decodeURIComponent(target.pathname.slice(1));
  const admin = new URL(url);
  admin.pathname = "/postgres";
  const client = new pg.Client({ connectionString: admin.toString() });
  await client.connect();
  try {
    const found = await client.query("SELECT 1 FROM pg_database WHERE datname = $1", [name]);
    if (found.rowCount === 0) {
      await client.query(`CREATE DATABASE "${name.replaceAll('"', '""')}"`).catch((err: { code?: string }) => {
        if (err.code !== "42P04") throw err; // created concurrently by another process
      });
      log?.info({ database: name }, "database created");
    }
  } finally {
    await client.end();
  }
}
