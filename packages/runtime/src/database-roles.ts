import pg from "pg";

/**
 * The services with a database, each owning the schema of its name
 * (docs/architecture.md#postgresql).
 */
export const DATABASE_SERVICES = ["accounts", "billing", "registry"] as const;
export type DatabaseService = (typeof DATABASE_SERVICES)[number];

/**
 * One service's two PostgreSQL roles, as the URLs its process is given name them (the user and
 * password of each URL are the role's): `url` (DATABASE_URL) is the runtime role, which may read
 * and write the rows of its schema's tables and nothing else; `migrateUrl` (MIGRATE_DATABASE_URL)
 * is the schema's owner, which runs the migrations. Neither is a superuser.
 */
export interface ServiceDatabase {
  schema: string;
  url: string;
  migrateUrl: string;
}

/** The role names of a service: `<prefix><service>` at run time, `<prefix><service>_owner` for migrations. */
export function serviceRoleNames(service: string, prefix = "mkt_"): { runtime: string; owner: string } {
  return { runtime: `${prefix}${service}`, owner: `${prefix}${service}_owner` };
}

/** `url` (an administrator's) with another user and password: the same server and database. */
export function roleUrl(url: string, role: string, password: string): string {
  const result = new URL(url);
  result.username = encodeURIComponent(role);
  result.password = encodeURIComponent(password);
  return result.toString();
}

/**
 * Creates or updates, idempotently, each service's two roles and its schema in the database
 * `adminUrl` names, connected as `adminUrl`'s user (a superuser, or the database's owner with
 * CREATEROLE, as a managed database's administrator is). Run it before the services start, and
 * again after changing a password in a URL: that is a rotation.
 *
 * Each role gets LOGIN and none of SUPERUSER, CREATEDB, CREATEROLE, REPLICATION, BYPASSRLS. The
 * owner owns the schema and everything in it (objects an earlier release created as another user
 * are handed over), so migrations run as it; the runtime role gets USAGE on the schema and
 * SELECT, INSERT, UPDATE, DELETE on its tables (and USAGE on its sequences), now and, through
 * default privileges, on every table the owner creates later. Neither can create objects
 * elsewhere: CREATE on `public` is revoked from PUBLIC, as PostgreSQL 15 does by default.
 */
export async function ensureServiceRoles(adminUrl: string, services: ServiceDatabase[]): Promise<void> {
  const database = databaseName(adminUrl);
  for (const service of services) {
    for (const url of [service.url, service.migrateUrl]) {
      if (databaseName(url) !== database) {
        throw new Error(`the ${service.schema} roles' URLs must name the database ${database}, as the admin URL does`);
      }
    }
  }
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const id = (name: string) => client.escapeIdentifier(name);
    // Before PostgreSQL 15 everyone could create tables in `public`; only its owner may revoke
    // that, so it is revoked only when still granted (an administrator may not own `public`).
    const open = await client.query(
      `SELECT 1 FROM pg_namespace n, aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
        WHERE n.nspname = 'public' AND a.grantee = 0 AND a.privilege_type = 'CREATE'`,
    );
    if (open.rowCount !== 0) await client.query(`REVOKE CREATE ON SCHEMA public FROM PUBLIC`);
    const { rows } = await client.query<{ superuser: boolean }>(
      `SELECT rolsuper AS superuser FROM pg_roles WHERE rolname = current_user`,
    );
    for (const service of services) {
      const runtime = urlRole(service.url);
      const owner = urlRole(service.migrateUrl);
      if (runtime.name === owner.name) throw new Error(`the ${service.schema} runtime and owner roles must differ`);
      for (const role of [owner, runtime]) await ensureRole(client, role, rows[0]!.superuser);
      await client.query(
        `GRANT CONNECT, TEMPORARY ON DATABASE ${id(database)} TO ${id(owner.name)}, ${id(runtime.name)}`,
      );
      // Without superuser, handing a schema to a role takes membership in it (PostgreSQL 15).
      if (!rows[0]!.superuser) await client.query(`GRANT ${id(owner.name)} TO current_user`);
      await ensureSchemaOwnedBy(client, service.schema, owner.name);
      const schema = id(service.schema);
      const [o, r] = [id(owner.name), id(runtime.name)];
      await client.query(`REVOKE ALL ON SCHEMA ${schema} FROM PUBLIC`);
      await client.query(`REVOKE CREATE ON SCHEMA ${schema} FROM ${r}`);
      await client.query(`GRANT USAGE ON SCHEMA ${schema} TO ${r}`);
      await client.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${schema} TO ${r}`);
      await client.query(`GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA ${schema} TO ${r}`);
      await client.query(
        `ALTER DEFAULT PRIVILEGES FOR ROLE ${o} IN SCHEMA ${schema} GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO ${r}`,
      );
      await client.query(
        `ALTER DEFAULT PRIVILEGES FOR ROLE ${o} IN SCHEMA ${schema} GRANT USAGE, SELECT ON SEQUENCES TO ${r}`,
      );
    }
  } finally {
    await client.end();
  }
}

interface Role {
  name: string;
  /** Undefined when the URL has none (a server trusting local connections): left as it is. */
  password: string | undefined;
}

function urlRole(url: string): Role {
  const parsed = new URL(url);
  const name = decodeURIComponent(parsed.username);
  if (!name) throw new Error("a service's database URL must name its role (postgres://ROLE:PASSWORD@host/db)");
  return { name, password: parsed.password ? decodeURIComponent(parsed.password) : undefined };
}

const databaseName = (url: string) => decodeURIComponent(new URL(url).pathname.slice(1));

const ROLE_ATTRIBUTES = "LOGIN NOCREATEDB NOCREATEROLE INHERIT";
/** Only a superuser may name these in ALTER ROLE; a CREATEROLE user cannot grant them anyway. */
const SUPERUSER_ATTRIBUTES = "NOSUPERUSER NOREPLICATION NOBYPASSRLS";

async function ensureRole(client: pg.Client, role: Role, asSuperuser: boolean): Promise<void> {
  const name = client.escapeIdentifier(role.name);
  const attributes = `${ROLE_ATTRIBUTES} ${asSuperuser ? SUPERUSER_ATTRIBUTES : ""}`;
  await client
    .query(`CREATE ROLE ${name} ${ROLE_ATTRIBUTES} ${SUPERUSER_ATTRIBUTES}`)
    .catch((err: { code?: string }) => {
      if (err.code !== "42710") throw err; // it exists (an earlier run, or another process now)
    });
  // An existing role is brought back to exactly these attributes (a non-superuser administrator
  // is refused altering one a superuser made a superuser: the run fails rather than keep it).
  await client.query(`ALTER ROLE ${name} ${attributes}`);
  // The statement carries the password; the server stores its SCRAM hash (password_encryption).
  if (role.password !== undefined) {
    await client.query(`ALTER ROLE ${name} PASSWORD ${client.escapeLiteral(role.password)}`);
  }
}

/**
 * Creates the schema for `owner`, or hands an existing one to it with its tables, views,
 * sequences, composite types and functions (a schema that migrations of an earlier release created
 * as the administrator). Sequences of identity and serial columns follow their tables.
 */
async function ensureSchemaOwnedBy(client: pg.Client, schema: string, owner: string): Promise<void> {
  const [s, o] = [client.escapeIdentifier(schema), client.escapeIdentifier(owner)];
  await client.query(`CREATE SCHEMA IF NOT EXISTS ${s} AUTHORIZATION ${o}`);
  await client.query(`ALTER SCHEMA ${s} OWNER TO ${o}`);
  const { rows } = await client.query<{ kind: string; name: string }>(
    `SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                           WHEN 'c' THEN 'TYPE' ELSE 'TABLE' END AS kind,
            format('%I.%I', n.nspname, c.relname) AS name
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'c')
        AND pg_get_userbyid(c.relowner) <> $2
        AND NOT (c.relkind = 'S' AND EXISTS (
          SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
     UNION ALL
     SELECT 'ROUTINE', format('%I.%I(%s)', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid))
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = $1 AND pg_get_userbyid(p.proowner) <> $2`,
    [schema, owner],
  );
  for (const { kind, name } of rows) {
    await client.query(`ALTER ${kind} ${name} OWNER TO ${o}`);
  }
}

/**
 * Removes roles made by `ensureServiceRoles` (a test's): what they own in the database `adminUrl`
 * names goes to the administrator (kept for inspection), their privileges there are revoked, and
 * the roles are dropped. Roles already gone are skipped.
 */
export async function dropServiceRoles(adminUrl: string, services: ServiceDatabase[]): Promise<void> {
  // Runtime roles first: an owner's default privileges name its runtime role, and one DROP OWNED
  // of both fails on that entry ("could not find tuple for default ACL").
  const names = [...services.map((s) => urlRole(s.url).name), ...services.map((s) => urlRole(s.migrateUrl).name)];
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ rolname: string }>(`SELECT rolname FROM pg_roles WHERE rolname = ANY($1)`, [
      names,
    ]);
    const found = names
      .filter((name) => rows.some((row) => row.rolname === name))
      .map((n) => client.escapeIdentifier(n));
    if (found.length === 0) return;
    await client.query(`REASSIGN OWNED BY ${found.join(", ")} TO current_user`);
    for (const role of found) await client.query(`DROP OWNED BY ${role}`);
    for (const role of found) await client.query(`DROP ROLE ${role}`);
  } finally {
    await client.end();
  }
}
