/**
 * `node scripts/migrate.ts <accounts|billing|registry>`: applies the service's pending migrations
 * as its schema's owner (MIGRATE_DATABASE_URL), under the same advisory lock as a start with
 * MIGRATE_ON_START, and exits. The Kubernetes base runs it as each service's init container, so
 * the service itself holds only its runtime role's URL (docs/deploy.md, "Database roles").
 */
import type { EntitySchema, MigrationObject } from "@mikro-orm/core";
import { commonSpecs, loadConfig, postgresUrl } from "@mkt/runtime/config";
import { openDatabase } from "@mkt/runtime/db";
import { DATABASE_SERVICES } from "@mkt/runtime/database-roles";
import { createLogger } from "@mkt/runtime/logger";

const schemas: Record<string, () => Promise<{ entities: EntitySchema[]; migrations: MigrationObject[] }>> = {
  accounts: async () => ({
    entities: (await import("../services/accounts/src/entities.ts")).entities,
    migrations: (await import("../services/accounts/migrations/index.ts")).migrations,
  }),
  billing: async () => ({
    entities: (await import("../services/billing/src/entities.ts")).entities,
    migrations: (await import("../services/billing/migrations/index.ts")).migrations,
  }),
  registry: async () => ({
    entities: (await import("../services/registry/src/entities.ts")).entities,
    migrations: (await import("../services/registry/migrations/index.ts")).migrations,
  }),
};

const service = process.argv[2] ?? "";
if (!(DATABASE_SERVICES as readonly string[]).includes(service)) {
  console.error(`usage: node scripts/migrate.ts <${DATABASE_SERVICES.join("|")}>`);
  process.exit(2);
}
const log = createLogger(`${service}-migrate`, "info");
try {
  const config = loadConfig({ LOG_LEVEL: commonSpecs.LOG_LEVEL, MIGRATE_DATABASE_URL: postgresUrl() });
  log.level = config.LOG_LEVEL;
  const { entities, migrations } = await schemas[service]!();
  // Connected as the owner throughout: nothing runs after the migrations.
  const url = config.MIGRATE_DATABASE_URL;
  const orm = await openDatabase({ url, migrateUrl: url, schema: service, entities, migrations, migrate: true, log });
  await orm.close();
  log.info("migrations up to date");
} catch (err) {
  // PostgreSQL's messages and the config loader's name objects and variables, never a password.
  log.error({ err: { message: (err as Error).message } }, "migrating failed");
  process.exit(1);
}
