import { randomBytes } from "node:crypto";
import {
  DATABASE_SERVICES,
  dropServiceRoles,
  ensureServiceRoles,
  roleUrl,
  serviceRoleNames,
  type DatabaseService,
  type ServiceDatabase,
} from "@mkt/runtime/database-roles";
import { freshDatabaseUrl } from "./env.ts";

export interface FreshServiceDatabases {
  /** The administrator's URL of the fresh database (for a test's own checks). */
  databaseUrl: string;
  /** Each service's runtime and owner URLs (DATABASE_URL, MIGRATE_DATABASE_URL). */
  services: Record<DatabaseService, ServiceDatabase>;
  /** Drops the roles; the database stays for inspection (its objects then belong to the administrator). */
  dropRoles(): Promise<void>;
}

/**
 * A fresh database (`freshDatabaseUrl`) with each service's two roles made in it, as
 * scripts/database-roles.ts makes them in a deployment. Roles are cluster-wide and test files
 * run in parallel, so their names start with the database's own unique name
 * (`mkt_test_<time>_<random>_billing_owner`); `dropStaleTestDatabases` removes any left behind.
 */
export async function freshServiceDatabases(server?: string): Promise<FreshServiceDatabases> {
  const databaseUrl = await freshDatabaseUrl(server);
  const prefix = `${decodeURIComponent(new URL(databaseUrl).pathname.slice(1))}_`;
  const password = () => randomBytes(18).toString("hex");
  const services = Object.fromEntries(
    DATABASE_SERVICES.map((schema) => {
      const roles = serviceRoleNames(schema, prefix);
      return [
        schema,
        {
          schema,
          url: roleUrl(databaseUrl, roles.runtime, password()),
          migrateUrl: roleUrl(databaseUrl, roles.owner, password()),
        },
      ];
    }),
  ) as Record<DatabaseService, ServiceDatabase>;
  await ensureServiceRoles(databaseUrl, Object.values(services));
  return { databaseUrl, services, dropRoles: () => dropServiceRoles(databaseUrl, Object.values(services)) };
}
