import pg from "pg";
import { MikroORM, type EntitySchema, type MigrationObject } from "@mikro-orm/core";
import { PostgreSqlDriver } from "@mikro-orm/postgresql";
import { Migrator } from "@mikro-orm/migrations";
import type { Logger } from "./logger.ts";
import { releaseLostConnections } from "./lost-connections.ts";

export type Orm = MikroORM<PostgreSqlDriver>;

export interface DatabaseOptions {
  /** The runtime role's URL (DATABASE_URL): every query the service makes once started. */
  url: string;
  /**
   * The schema owner's URL (MIGRATE_DATABASE_URL), for migrations only (docs/deploy.md,
   * "Database roles"); `url` when unset, as with one administrator URL for everything.
   */
  migrateUrl?: string | undefined;
  /** The service's own Postgres schema (one per service: docs/architecture.md#postgresql). */
  schema: string;
  entities: EntitySchema[];
  migrations: MigrationObject[];
  migrate: boolean;
  poolMax?: number;
  log: Logger;
}

/**
 * Opens the service's database: with `migrate`, first applies committed migrations as the
 * schema's owner (`migrateUrl`), under an advisory lock, so replicas starting together migrate
 * once; then connects as `url`. With one URL for both (no `migrateUrl`), it also creates the
 * database and the schema when missing.
 */
export async function openDatabase(options: DatabaseOptions): Promise<Orm> {
  const ownerUrl = options.migrate && options.migrateUrl !== options.url ? options.migrateUrl : undefined;
  if (ownerUrl) {
    // The migrations need no entities; the service's are discovered once, by its own ORM below.
    const owner = await initOrm({ ...options, entities: [] }, ownerUrl, 2);
    try {
      await migrate(owner, ownerUrl, options);
    } finally {
      await owner.close();
    }
  } else if (options.migrate) {
    // One URL for both. An owner role could not create databases (nor may it reach the
    // `postgres` database): with two, whoever made the roles made the database too.
    await ensureDatabase(options.url, options.log);
  }
  const orm = await initOrm(options, options.url, options.poolMax ?? 10);
  try {
    if (options.migrate && !ownerUrl) await migrate(orm, options.url, options);
    // Connect now: a DATABASE_URL that cannot connect stops the start, not the first request.
    else await orm.em.getConnection().execute("select 1");
  } catch (err) {
    await orm.close();
    throw err;
  }
  return orm;
}

function initOrm(options: DatabaseOptions, url: string, poolMax: number): Promise<Orm> {
  return MikroORM.init<PostgreSqlDriver>({
    driver: PostgreSqlDriver,
    clientUrl: url,
    // Raw SQL (hot paths) names tables without a schema: the service's schema is the search path.
    driverOptions: {
      options: `-c search_path=${options.schema}`,
      // Transactions cut by a database outage must not keep their pool slots (lost-connections.ts).
      onPoolCreated: releaseLostConnections,
    },
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
    pool: { min: 0, max: poolMax },
    discovery: { warnWhenNoEntities: false },
    forceUtcTimezone: true,
    debug: false,
  });
}

async function migrate(orm: Orm, url: string, options: DatabaseOptions): Promise<void> {
  const lock = new pg.Client({ connectionString: url });
  await lock.connect();
  try {
    await lock.query("SELECT pg_advisory_lock(hashtext($1))", [`mkt-migrate:${options.schema}`]);
    // The owner role may not create schemas (CREATE SCHEMA IF NOT EXISTS checks that first):
    // its schema exists already, made for it by scripts/database-roles.ts.
    const found = await lock.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [options.schema]);
    if (found.rowCount === 0) await lock.query(`CREATE SCHEMA "${options.schema}"`);
    const applied = await orm.migrator.up();
    if (applied.length > 0) options.log.info({ migrations: applied.map((m) => m.name) }, "migrations applied");
  } catch (err) {
    if ((err as { code?: string }).code !== "42501") throw err;
    throw new Error(
      `migrating the ${options.schema} schema was refused (${(err as Error).message}): MIGRATE_DATABASE_URL ` +
        `(DATABASE_URL when unset) must name the schema's owner (docs/deploy.md, "Database roles")`,
      { cause: err },
    );
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
