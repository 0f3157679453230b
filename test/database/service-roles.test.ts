import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, type Orm } from "@mkt/runtime/db";
import {
  DATABASE_SERVICES,
  dropServiceRoles,
  ensureServiceRoles,
  roleUrl,
  serviceRoleNames,
  type DatabaseService,
} from "@mkt/runtime/database-roles";
import { createLogger } from "@mkt/runtime/logger";
import { freshDatabaseUrl } from "@mkt/testkit/env";
import { freshServiceDatabases, type FreshServiceDatabases } from "@mkt/testkit/service-databases";
import { migrations as accountsMigrations } from "../../services/accounts/migrations/index.ts";
import { entities as accountsEntities } from "../../services/accounts/src/entities.ts";
import { migrations as billingMigrations } from "../../services/billing/migrations/index.ts";
import { entities as billingEntities } from "../../services/billing/src/entities.ts";
import { migrations as registryMigrations } from "../../services/registry/migrations/index.ts";
import { entities as registryEntities } from "../../services/registry/src/entities.ts";

// Each service's runtime role (DATABASE_URL) against the real PostgreSQL, after its real
// migrations ran as the schema's owner (MIGRATE_DATABASE_URL), both made by the bootstrap that
// npm start, compose's db-init and the operator run (packages/runtime/src/database-roles.ts).

const log = createLogger("roles-test", "silent");
const schemaOf = {
  accounts: { entities: accountsEntities, migrations: accountsMigrations },
  billing: { entities: billingEntities, migrations: billingMigrations },
  registry: { entities: registryEntities, migrations: registryMigrations },
};

let db: FreshServiceDatabases;
const orms: Orm[] = [];
const clients: pg.Client[] = [];

/** A connection as `url`'s role (closed after the tests). */
async function connectAs(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  clients.push(client);
  return client;
}

const open = (service: DatabaseService, url: string, migrateUrl: string | undefined, migrate = true) =>
  openDatabase({ url, migrateUrl, schema: service, ...schemaOf[service], migrate, poolMax: 1, log });

/** The SQLSTATE a statement fails with, or "ok". */
const outcome = (client: pg.Client, sql: string) =>
  client.query(sql).then(
    () => "ok",
    (err: { code?: string }) => err.code,
  );

const roleNames = (service: DatabaseService) => ({
  runtime: decodeURIComponent(new URL(db.services[service].url).username),
  owner: decodeURIComponent(new URL(db.services[service].migrateUrl).username),
});

beforeAll(async () => {
  db = await freshServiceDatabases();
  for (const service of DATABASE_SERVICES) {
    orms.push(await open(service, db.services[service].url, db.services[service].migrateUrl));
  }
});

afterAll(async () => {
  for (const client of clients) await client.end().catch(() => undefined);
  for (const orm of orms) await orm.close();
  await db?.dropRoles();
});

it("names the roles after the run's own database, since roles are cluster-wide", () => {
  const database = new URL(db.databaseUrl).pathname.slice(1);
  for (const service of DATABASE_SERVICES) {
    expect(roleNames(service)).toEqual({ runtime: `${database}_${service}`, owner: `${database}_${service}_owner` });
  }
});

it("gives no role superuser, role or database creation, replication or RLS bypass", async () => {
  const admin = await connectAs(db.databaseUrl);
  const names = DATABASE_SERVICES.flatMap((s) => Object.values(roleNames(s)));
  const { rows } = await admin.query(
    `SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, rolcanlogin
       FROM pg_roles WHERE rolname = ANY($1) ORDER BY rolname`,
    [names],
  );
  expect(rows).toHaveLength(6);
  for (const row of rows) {
    expect(row, row.rolname).toMatchObject({
      rolsuper: false,
      rolcreaterole: false,
      rolcreatedb: false,
      rolreplication: false,
      rolbypassrls: false,
      rolcanlogin: true,
    });
  }
});

it("ran each service's migrations as its owner, who owns the schema and every table in it", async () => {
  const admin = await connectAs(db.databaseUrl);
  for (const service of DATABASE_SERVICES) {
    const { owner } = roleNames(service);
    const schema = await admin.query("SELECT pg_get_userbyid(nspowner) AS owner FROM pg_namespace WHERE nspname = $1", [
      service,
    ]);
    expect(schema.rows[0].owner, service).toBe(owner);
    const tables = await admin.query<{ tablename: string; tableowner: string }>(
      "SELECT tablename, tableowner FROM pg_tables WHERE schemaname = $1",
      [service],
    );
    expect(tables.rows.map((t) => t.tablename)).toContain("mikro_orm_migrations");
    expect(new Set(tables.rows.map((t) => t.tableowner)), service).toEqual(new Set([owner]));
  }
});

describe("a service's runtime role", () => {
  it("reads and writes the rows of its own tables", async () => {
    const accounts = await connectAs(db.services.accounts.url);
    await accounts.query(
      "INSERT INTO accounts.ip_attempts (purpose, client_ip, window_start) VALUES ('signup', '192.0.2.1', now())",
    );
    await accounts.query("UPDATE accounts.ip_attempts SET attempts = attempts + 1 WHERE client_ip = '192.0.2.1'");
    const read = await accounts.query("SELECT attempts FROM accounts.ip_attempts WHERE client_ip = '192.0.2.1'");
    expect(read.rows).toEqual([{ attempts: 1 }]);
    await accounts.query("DELETE FROM accounts.ip_attempts");
    const registry = await connectAs(db.services.registry.url);
    expect(await outcome(registry, "SELECT * FROM registry.hosters")).toBe("ok");
  });

  it("cannot read or write another service's schema, and neither can its owner", async () => {
    for (const url of [db.services.accounts.url, db.services.accounts.migrateUrl]) {
      const accounts = await connectAs(url);
      expect(await outcome(accounts, "SELECT * FROM billing.wallets")).toBe("42501");
      expect(await outcome(accounts, "INSERT INTO billing.wallets (account_id) VALUES (gen_random_uuid())")).toBe(
        "42501",
      );
      expect(await outcome(accounts, "SELECT * FROM registry.hosters")).toBe("42501");
    }
    const billing = await connectAs(db.services.billing.url);
    expect(await outcome(billing, "SELECT * FROM accounts.api_keys")).toBe("42501");
  });

  it("cannot create, alter, drop or truncate tables, in its schema or anywhere else", async () => {
    const billing = await connectAs(db.services.billing.url);
    expect(await outcome(billing, "CREATE TABLE billing.extra (id int)")).toBe("42501");
    expect(await outcome(billing, "CREATE TABLE public.extra (id int)")).toBe("42501");
    expect(await outcome(billing, "CREATE SCHEMA extra")).toBe("42501");
    expect(await outcome(billing, "ALTER TABLE billing.wallets ADD COLUMN extra int")).toBe("42501");
    expect(await outcome(billing, "DROP TABLE billing.wallets")).toBe("42501");
    expect(await outcome(billing, "TRUNCATE billing.wallets")).toBe("42501");
  });

  it("makes and detaches billing's usage record partitions only through the functions its owner made", async () => {
    const billing = await connectAs(db.services.billing.url);
    // No search path of billing's: the functions carry their own.
    const made = await billing.query(
      "SELECT billing.usage_records_add_partitions('2040-01-15T00:00:00Z', '2040-02-15T00:00:00Z') AS name",
    );
    expect(made.rows.map((r: { name: string }) => r.name)).toEqual([
      "usage_records_y2040m01",
      "usage_records_y2040m02",
    ]);
    const owner = roleNames("billing").owner;
    const owners = await billing.query(
      "SELECT c.relname, pg_get_userbyid(c.relowner) AS owner FROM pg_class c WHERE c.relname LIKE 'usage_records_y2040m%'",
    );
    expect(owners.rows.every((r: { owner: string }) => r.owner === owner)).toBe(true);
    const detached = await billing.query(
      "SELECT billing.usage_records_detach_partitions('2040-02-01T00:00:00Z') AS name",
    );
    expect(detached.rows.map((r: { name: string }) => r.name)).toContain("usage_records_y2040m01");
    expect(
      await outcome(billing, "ALTER TABLE billing.usage_records DETACH PARTITION billing.usage_records_y2040m02"),
    ).toBe("42501");
  });

  it("may use a table a later migration adds (default privileges), with no new grant", async () => {
    const owner = await connectAs(db.services.billing.migrateUrl);
    await owner.query("CREATE TABLE billing.later (id bigint generated always as identity primary key, note text)");
    const billing = await connectAs(db.services.billing.url);
    await billing.query("INSERT INTO billing.later (note) VALUES ('added after the bootstrap')");
    expect((await billing.query("SELECT note FROM billing.later")).rows).toEqual([
      { note: "added after the bootstrap" },
    ]);
  });

  it("is refused migrating, with a message naming MIGRATE_DATABASE_URL", async () => {
    const admin = await connectAs(db.databaseUrl);
    // A migration not applied yet, so there is something to refuse: the outbox's drop, its table
    // back as its owner made it.
    await admin.query(
      "DELETE FROM registry.mikro_orm_migrations WHERE name = 'Migration20261228000000DropUsageOutbox'",
    );
    const owner = await connectAs(db.services.registry.migrateUrl);
    await owner.query("CREATE TABLE registry.usage_outbox (id bigint)");
    await expect(open("registry", db.services.registry.url, undefined)).rejects.toThrow(
      /registry schema was refused.*MIGRATE_DATABASE_URL/s,
    );
    // Its owner applies it: the table is gone for the runtime role too.
    orms.push(await open("registry", db.services.registry.url, db.services.registry.migrateUrl));
    const registry = await connectAs(db.services.registry.url);
    expect(await outcome(registry, "SELECT * FROM registry.usage_outbox")).toBe("42P01");
  });
});

describe("the bootstrap", () => {
  it("runs again without harm, setting the passwords the URLs carry (a rotation)", async () => {
    const admin = await connectAs(db.databaseUrl);
    const passwordOf = async (role: string) =>
      (await admin.query("SELECT rolpassword FROM pg_authid WHERE rolname = $1", [role])).rows[0].rolpassword;
    const before = await passwordOf(roleNames("accounts").runtime);
    const rotated = new URL(db.services.accounts.url);
    rotated.password = "rotated0123456789abcdef";
    await ensureServiceRoles(db.databaseUrl, [{ ...db.services.accounts, url: rotated.toString() }]);
    await ensureServiceRoles(db.databaseUrl, Object.values(db.services));
    expect(await passwordOf(roleNames("accounts").runtime)).not.toBe(before);
    const accounts = await connectAs(db.services.accounts.url);
    expect(await outcome(accounts, "SELECT * FROM accounts.accounts")).toBe("ok");
    expect(await outcome(accounts, "CREATE TABLE accounts.extra (id int)")).toBe("42501");
  });

  it("hands a schema an earlier release migrated as the administrator to the owner", async () => {
    const earlier = await freshServiceDatabases();
    // As before roles: the schema, its tables, identity sequence and function, all the administrator's.
    await (await open("billing", earlier.databaseUrl, undefined)).close();
    await (await open("registry", earlier.databaseUrl, undefined)).close();
    try {
      await ensureServiceRoles(earlier.databaseUrl, Object.values(earlier.services));
      const admin = await connectAs(earlier.databaseUrl);
      const owners = await admin.query<{ owner: string }>(
        `SELECT DISTINCT pg_get_userbyid(relowner) AS owner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'billing'
         UNION SELECT DISTINCT pg_get_userbyid(proowner) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'billing'`,
      );
      const billingOwner = decodeURIComponent(new URL(earlier.services.billing.migrateUrl).username);
      expect(owners.rows).toEqual([{ owner: billingOwner }]);
      // The owner migrates from here on, and the runtime role uses what was there.
      await (await open("billing", earlier.services.billing.url, earlier.services.billing.migrateUrl)).close();
      const registry = await connectAs(earlier.services.registry.url);
      expect(await outcome(registry, "SELECT * FROM registry.hosters")).toBe("ok");
    } finally {
      await earlier.dropRoles();
    }
  });

  it("works as the database's owner with CREATEROLE, not a superuser (a managed database's admin)", async () => {
    const url = await freshDatabaseUrl();
    const name = new URL(url).pathname.slice(1);
    const superuser = await connectAs(url);
    const adminUrl = roleUrl(url, `${name}_admin`, "admin-password");
    const services = DATABASE_SERVICES.map((schema) => {
      const roles = serviceRoleNames(schema, `${name}_`);
      return { schema, url: roleUrl(url, roles.runtime, "r"), migrateUrl: roleUrl(url, roles.owner, "o") };
    });
    try {
      await superuser.query(`CREATE ROLE ${name}_admin LOGIN CREATEROLE`);
      await superuser.query(`ALTER DATABASE ${name} OWNER TO ${name}_admin`);
      await ensureServiceRoles(adminUrl, services);
      await ensureServiceRoles(adminUrl, services);
      const [accounts] = services;
      await (await open("accounts", accounts!.url, accounts!.migrateUrl)).close();
      const runtime = await connectAs(accounts!.url);
      expect(await outcome(runtime, "SELECT * FROM accounts.accounts")).toBe("ok");
      expect(await outcome(runtime, "CREATE TABLE public.extra (id int)")).toBe("42501");
      const { rows } = await superuser.query("SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = $1", [
        `${name}_accounts_owner`,
      ]);
      expect(rows).toEqual([{ rolsuper: false, rolcreaterole: false }]);
    } finally {
      await dropServiceRoles(url, services);
      const admin = await superuser.query("SELECT 1 FROM pg_roles WHERE rolname = $1", [`${name}_admin`]);
      if (admin.rowCount !== 0) {
        await superuser.query(`REASSIGN OWNED BY ${name}_admin TO current_user`);
        await superuser.query(`DROP OWNED BY ${name}_admin`);
        await superuser.query(`DROP ROLE ${name}_admin`);
      }
    }
  });

  it("drops a test's roles, leaving its database to the administrator", async () => {
    const other = await freshServiceDatabases();
    await (await open("accounts", other.services.accounts.url, other.services.accounts.migrateUrl)).close();
    await dropServiceRoles(other.databaseUrl, Object.values(other.services));
    const admin = await connectAs(other.databaseUrl);
    const prefix = `${new URL(other.databaseUrl).pathname.slice(1)}_%`;
    expect((await admin.query("SELECT rolname FROM pg_roles WHERE rolname LIKE $1", [prefix])).rows).toEqual([]);
    expect((await admin.query("SELECT count(*)::int AS n FROM accounts.accounts")).rows).toEqual([{ n: 0 }]);
  });
});
