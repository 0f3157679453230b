import { afterAll, describe, expect, it } from "vitest";
import { ReferenceKind, type EntitySchema, type MigrationObject } from "@mikro-orm/core";
import { openDatabase, type Orm } from "@mkt/runtime/db";
import { createLogger } from "@mkt/runtime/logger";
import { dropDatabase, freshDatabaseUrl } from "@mkt/testkit/env";
import { migrations as accountsMigrations } from "../../services/accounts/migrations/index.ts";
import { entities as accountsEntities } from "../../services/accounts/src/entities.ts";
import { migrations as billingMigrations } from "../../services/billing/migrations/index.ts";
import { entities as billingEntities } from "../../services/billing/src/entities.ts";
import { migrations as registryMigrations } from "../../services/registry/migrations/index.ts";
import { entities as registryEntities } from "../../services/registry/src/entities.ts";

// Each service's entities describe its tables as its migrations leave them: every mapped table
// has exactly the entity's columns, with the entity's types and nullability, so a column a migration adds
// cannot be forgotten by the entity (which the ORM's reads and typed queries are built from).

const log = createLogger("entities-test", "silent");
const SERVICES: Record<string, { entities: EntitySchema[]; migrations: MigrationObject[] }> = {
  accounts: { entities: accountsEntities, migrations: accountsMigrations },
  billing: { entities: billingEntities, migrations: billingMigrations },
  registry: { entities: registryEntities, migrations: registryMigrations },
};

const urls: string[] = [];
afterAll(async () => {
  for (const url of urls) await dropDatabase(url);
});

interface Column {
  nullable: boolean;
  /** PostgreSQL's name for the type (`int8`, `text`, `timestamptz`, ...). */
  type: string;
}

/** The ORM's column type as PostgreSQL names it: `bigint` is `int8`, `timestamptz(6)` is `timestamptz`. */
function pgTypeName(columnType: string): string {
  const base = columnType
    .toLowerCase()
    .replace(/\(.*\)$/, "")
    .trim();
  const aliases: Record<string, string> = {
    bigint: "int8",
    int: "int4",
    integer: "int4",
    smallint: "int2",
    boolean: "bool",
    json: "jsonb",
    "timestamp with time zone": "timestamptz",
    "character varying": "varchar",
  };
  return aliases[base] ?? base;
}

/** Each table's columns in `schema`, as PostgreSQL has them after the migrations. */
async function tableColumns(orm: Orm, schema: string): Promise<Map<string, Map<string, Column>>> {
  const rows = await orm.em
    .getConnection()
    .execute<{ table_name: string; column_name: string; is_nullable: string; udt_name: string }[]>(
      `select table_name, column_name, is_nullable, udt_name from information_schema.columns
        where table_schema = ? order by table_name, ordinal_position`,
      [schema],
    );
  const tables = new Map<string, Map<string, Column>>();
  for (const row of rows) {
    const columns = tables.get(row.table_name) ?? new Map<string, Column>();
    columns.set(row.column_name, { nullable: row.is_nullable === "YES", type: row.udt_name });
    tables.set(row.table_name, columns);
  }
  return tables;
}

/** The columns an entity maps, with whether it allows null. */
function entityColumns(orm: Orm): Map<string, Map<string, Column>> {
  const mapped = new Map<string, Map<string, Column>>();
  for (const meta of orm.getMetadata().getAll().values()) {
    if (meta.embeddable || meta.virtual) continue;
    const columns = new Map<string, Column>();
    for (const prop of meta.props) {
      if (prop.persist === false || prop.kind === ReferenceKind.ONE_TO_MANY || prop.kind === ReferenceKind.MANY_TO_MANY)
        continue;
      (prop.fieldNames ?? []).forEach((field, i) =>
        columns.set(field, { nullable: prop.nullable === true, type: pgTypeName(prop.columnTypes?.[i] ?? "?") }),
      );
    }
    mapped.set(meta.tableName, columns);
  }
  return mapped;
}

describe.each(Object.keys(SERVICES))("the %s entities", (service) => {
  it("map each of their tables' columns, no more and no fewer, with the same types and nullability", async () => {
    const url = await freshDatabaseUrl();
    urls.push(url);
    const orm = await openDatabase({ url, schema: service, ...SERVICES[service]!, migrate: true, poolMax: 1, log });
    try {
      const tables = await tableColumns(orm, service);
      const differences: string[] = [];
      for (const [table, columns] of entityColumns(orm)) {
        const actual = tables.get(table);
        if (!actual) {
          differences.push(`${table}: no such table`);
          continue;
        }
        for (const [name, column] of columns) {
          const found = actual.get(name);
          if (!found) differences.push(`${table}.${name}: mapped, but no such column`);
          else if (found.nullable !== column.nullable)
            differences.push(
              `${table}.${name}: ${found.nullable ? "nullable" : "not null"} in the table, not in the entity`,
            );
          else if (found?.type !== column.type)
            differences.push(`${table}.${name}: ${found?.type} in the table, ${column.type} mapped`);
        }
        for (const name of actual.keys()) if (!columns.has(name)) differences.push(`${table}.${name}: not mapped`);
      }
      expect(differences).toEqual([]);
    } finally {
      await orm.close();
    }
  });
});
