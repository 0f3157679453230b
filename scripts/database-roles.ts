/**
 * `npm run db:roles`: creates or updates each service's two PostgreSQL roles and its schema
 * (docs/deploy.md, "Database roles"). The URLs the services are given say everything: their
 * users are the roles' names and their passwords the roles' passwords, so this runs with the very
 * values the services get, plus an administrator's URL of the same database. Idempotent: run it
 * before the first start, after an upgrade that hands older schemas over, and to rotate a
 * password (after changing it in the URLs). Compose runs it as the one-shot service `db-init`.
 *
 *   DATABASE_ADMIN_URL                 a superuser's (or a CREATEROLE user's) URL of the database
 *   ACCOUNTS_DATABASE_URL, ACCOUNTS_MIGRATE_DATABASE_URL, and the same for BILLING and REGISTRY
 */
import { loadConfig, postgresUrl } from "@mkt/runtime/config";
import { ensureDatabase } from "@mkt/runtime/db";
import { DATABASE_SERVICES, ensureServiceRoles, type ServiceDatabase } from "@mkt/runtime/database-roles";

const variables = (service: string) => [
  `${service.toUpperCase()}_DATABASE_URL`,
  `${service.toUpperCase()}_MIGRATE_DATABASE_URL`,
];
const specs = Object.fromEntries([
  ["DATABASE_ADMIN_URL", postgresUrl()],
  ...DATABASE_SERVICES.flatMap((service) => variables(service).map((name) => [name, postgresUrl()])),
]);

try {
  const env = loadConfig(specs) as Record<string, string>;
  const services: ServiceDatabase[] = DATABASE_SERVICES.map((schema) => {
    const [url, migrateUrl] = variables(schema).map((name) => env[name]!);
    return { schema, url: url!, migrateUrl: migrateUrl! };
  });
  await ensureDatabase(env.DATABASE_ADMIN_URL!);
  await ensureServiceRoles(env.DATABASE_ADMIN_URL!, services);
  for (const { schema, url, migrateUrl } of services) {
    const role = (u: string) => decodeURIComponent(new URL(u).username);
    console.log(`${schema}: schema owned by ${role(migrateUrl)}, rows used by ${role(url)}`);
  }
} catch (err) {
  // PostgreSQL's messages name roles and objects, never a password; the URLs are not echoed.
  console.error(`database roles: ${(err as Error).message}`);
  process.exit(1);
}
