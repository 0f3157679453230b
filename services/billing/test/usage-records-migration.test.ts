import { randomUUID } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { openDatabase } from "@mkt/runtime/db";
import { createLogger } from "@mkt/runtime/logger";
import { dropDatabase, freshDatabaseUrl } from "@mkt/testkit/env";
import { migrations } from "../migrations/index.ts";

// Migration20270204000000UsageRecordsAppend on a database that already holds usage records: their
// text ids become uuids, unchanged, in the monthly partitions of their months; a record whose id
// is not a UUID stops the migration, naming how many there are, before anything has moved.

const log = createLogger("usage-records-migration-test", "silent");
const LAST = "Migration20270204000000UsageRecordsAppend";
const before = migrations.slice(
  0,
  migrations.findIndex((m) => m.name === LAST),
);
const urls: string[] = [];
afterAll(async () => {
  for (const url of urls) await dropDatabase(url);
});

/** A database migrated up to the one before, with these records in it. */
async function withRecords(records: Array<{ id: string; at: string }>) {
  const url = await freshDatabaseUrl();
  urls.push(url);
  const orm = await openDatabase({ url, schema: "billing", entities: [], migrations: before, migrate: true, log });
  for (const r of records) {
    await orm.em.getConnection().execute(
      `insert into usage_records (request_id, account_id, key_id, model_id, provider, input_tokens, output_tokens,
         cost_micros, platform_fee_micros, hoster_earned_micros, latency_ms, success, created_at)
       values (?, ?, 'k', 'm', 'local', 1, 1, 0, 0, 0, 1, true, ?)`,
      [r.id, randomUUID(), r.at],
    );
  }
  await orm.close();
  return url;
}

const migrateAll = (url: string) =>
  openDatabase({ url, schema: "billing", entities: [], migrations, migrate: true, log });

describe("usage records moved to a partitioned table", () => {
  it("keeps existing v4 ids and times, each record in its month's partition", async () => {
    const records = [
      { id: randomUUID(), at: "2026-10-03T08:00:00.123456Z" },
      { id: randomUUID(), at: "2026-11-30T23:59:59.999999Z" },
      { id: randomUUID(), at: "2026-12-01T00:00:00Z" },
    ];
    const orm = await migrateAll(await withRecords(records));
    try {
      const rows = await orm.em.getConnection().execute<Array<{ id: string; at: string; part: string; type: string }>>(
        `select request_id::text as id, to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as at,
           tableoid::regclass::text as part, pg_typeof(request_id)::text as type
         from usage_records order by created_at`,
      );
      expect(rows).toEqual([
        { id: records[0]!.id, at: "2026-10-03T08:00:00.123456Z", part: "usage_records_y2026m10", type: "uuid" },
        { id: records[1]!.id, at: "2026-11-30T23:59:59.999999Z", part: "usage_records_y2026m11", type: "uuid" },
        { id: records[2]!.id, at: "2026-12-01T00:00:00.000000Z", part: "usage_records_y2026m12", type: "uuid" },
      ]);
      const [key] = await orm.em.getConnection().execute<Array<{ def: string }>>(
        `select pg_get_constraintdef(oid) as def from pg_constraint where conname = 'usage_records_pkey'
           and conrelid = 'usage_records'::regclass`,
      );
      expect(key!.def).toBe("PRIMARY KEY (request_id, created_at)");
    } finally {
      await orm.close();
    }
  });

  it("stops, naming the count, when a record's id is not a UUID", async () => {
    const url = await withRecords([
      { id: "req_1", at: "2026-10-03T08:00:00Z" },
      { id: randomUUID(), at: "2026-10-03T08:00:00Z" },
    ]);
    await expect(migrateAll(url)).rejects.toThrow(/1 usage records have a request_id that is not a UUID/);
  });
});
