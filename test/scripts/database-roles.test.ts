import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { afterAll, expect, it } from "vitest";
import { DATABASE_SERVICES, dropServiceRoles, roleUrl, serviceRoleNames } from "@mkt/runtime/database-roles";

// `npm run db:roles` as an operator (and compose's db-init) runs it: the administrator's URL and
// the six URLs the services get, in the environment. The database does not exist yet.

const root = join(import.meta.dirname, "../..");
const base = new URL(process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/marketplace");
// A test database's name, so the suite's stale-state sweep finds it (and these roles) if left.
const database = `mkt_test_${Date.now().toString(36)}_${randomBytes(4).toString("hex")}`;
base.pathname = `/${database}`;
const adminUrl = base.toString();
const services = DATABASE_SERVICES.map((schema) => {
  const roles = serviceRoleNames(schema, `${database}_`);
  return {
    schema,
    url: roleUrl(adminUrl, roles.runtime, randomBytes(12).toString("hex")),
    migrateUrl: roleUrl(adminUrl, roles.owner, randomBytes(12).toString("hex")),
  };
});
const env: NodeJS.ProcessEnv = {
  PATH: process.env.PATH,
  DATABASE_ADMIN_URL: adminUrl,
  ...Object.fromEntries(
    services.flatMap((s) => [
      [`${s.schema.toUpperCase()}_DATABASE_URL`, s.url],
      [`${s.schema.toUpperCase()}_MIGRATE_DATABASE_URL`, s.migrateUrl],
    ]),
  ),
};

function run(
  environment: NodeJS.ProcessEnv,
  args = ["scripts/database-roles.ts"],
): Promise<{ code: number; stdout: string; stderr: string }> {
  return promisify(execFile)(process.execPath, args, { cwd: root, env: environment }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (err: { code: number; stdout: string; stderr: string }) => ({
      code: err.code,
      stdout: err.stdout,
      stderr: err.stderr,
    }),
  );
}

afterAll(async () => {
  await dropServiceRoles(adminUrl, services).catch(() => undefined);
});

it("creates the database, each service's two roles and its schema, and runs again without harm", async () => {
  for (let pass = 0; pass < 2; pass++) {
    const { code, stdout, stderr } = await run(env);
    expect(stderr).toBe("");
    expect(code).toBe(0);
    for (const schema of DATABASE_SERVICES) {
      const { runtime, owner } = serviceRoleNames(schema, `${database}_`);
      expect(stdout).toContain(`${schema}: schema owned by ${owner}, rows used by ${runtime}`);
    }
  }
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rows } = await client.query(
      "SELECT nspname, pg_get_userbyid(nspowner) AS owner FROM pg_namespace WHERE nspname = ANY($1) ORDER BY 1",
      [[...DATABASE_SERVICES]],
    );
    expect(rows).toEqual(
      DATABASE_SERVICES.map((schema) => ({ nspname: schema, owner: serviceRoleNames(schema, `${database}_`).owner })),
    );
  } finally {
    await client.end();
  }
});

it("migrates one service as its schema's owner with scripts/migrate.ts (Kubernetes' init container)", async () => {
  const billing = services.find((s) => s.schema === "billing")!;
  const migrate = (schema: string) =>
    run({ PATH: process.env.PATH, MIGRATE_DATABASE_URL: billing.migrateUrl }, ["scripts/migrate.ts", schema]);
  const first = await migrate("billing");
  expect(first.code, first.stderr).toBe(0);
  expect(first.stdout).toContain("migrations applied");
  const again = await migrate("billing");
  expect(again.code).toBe(0);
  expect(again.stdout).not.toContain("migrations applied");
  expect(again.stdout).toContain("migrations up to date");
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rows } = await client.query("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'billing'");
    expect(rows).toEqual([{ tableowner: serviceRoleNames("billing", `${database}_`).owner }]);
  } finally {
    await client.end();
  }
  // Another service's schema is not the billing owner's to migrate.
  const refused = await migrate("accounts");
  expect(refused.code).toBe(1);
  expect(refused.stdout).toMatch(/accounts schema was refused.*MIGRATE_DATABASE_URL/);
  expect(refused.stdout).not.toContain(new URL(billing.migrateUrl).password);
  expect((await migrate("edge")).code).toBe(2);
});

it("names a missing or malformed variable and never echoes a password", async () => {
  const password = "leaked-if-echoed-0123";
  const bad: NodeJS.ProcessEnv = { ...env, BILLING_DATABASE_URL: `postgres//mkt_billing:${password}@db/marketplace` };
  delete bad.REGISTRY_MIGRATE_DATABASE_URL;
  const { code, stdout, stderr } = await run(bad);
  expect(code).toBe(1);
  expect(stderr).toMatch(/BILLING_DATABASE_URL/);
  expect(stderr).toMatch(/REGISTRY_MIGRATE_DATABASE_URL/);
  expect(stdout + stderr).not.toContain(password);
});
