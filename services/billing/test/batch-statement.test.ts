import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, type Orm } from "@mkt/runtime/db";
import { createLogger } from "@mkt/runtime/logger";
import { dropDatabase, freshDatabaseUrl } from "@mkt/testkit/env";
import { runTogether, sqlArray } from "../src/batch-statement.ts";

// Settlement binds each column of a batch as one array literal: whatever text an event carries
// (a model id, an error code from an upstream) must reach PostgreSQL unchanged.
let orm: Orm;
let url: string;
beforeAll(async () => {
  url = await freshDatabaseUrl();
  orm = await openDatabase({
    url,
    schema: "batch_statement_test",
    entities: [],
    migrations: [],
    migrate: true,
    log: createLogger("batch-statement-test", "silent"),
  });
});
afterAll(async () => {
  await orm?.close();
  await dropDatabase(url);
});

const roundTrip = async (sql: string, values: unknown[]) =>
  (await orm.em.execute(sql, [sqlArray(values as never)])).map((row) => row.v as unknown);

describe("sqlArray", () => {
  it("carries any text, in order: quotes, backslashes, commas, braces, NULL as a word, empty, unicode", async () => {
    const texts = [
      'say "hi"',
      "back\\slash",
      "a,b",
      "{x}",
      "NULL",
      "",
      " padded ",
      "it's",
      "ünï\u{1F600}",
      '\\"',
      "\n",
    ];
    expect(await roundTrip(`select unnest(?::text[]) as v`, texts)).toEqual(texts);
  });

  it("carries NULL, bigints beyond 2^53, booleans and times", async () => {
    expect(await roundTrip(`select unnest(?::bigint[])::text as v`, [9_007_199_254_740_993n, -1n, null])).toEqual([
      "9007199254740993",
      "-1",
      null,
    ]);
    expect(await roundTrip(`select unnest(?::boolean[]) as v`, [true, false])).toEqual([true, false]);
    const at = new Date("2026-11-28T02:03:04.567Z");
    const [time] = await roundTrip(`select unnest(?::timestamptz[]) as v`, [at]);
    expect(new Date(time as string).toISOString()).toBe(at.toISOString());
  });

  it("is an empty array for no values, which unnest turns into no rows", async () => {
    expect(await roundTrip(`select unnest(?::uuid[]) as v`, [])).toEqual([]);
  });
});

describe("runTogether", () => {
  it("runs every CTE in one statement, including those the final select does not read", async () => {
    await orm.em.execute(`create table notes (id int primary key, body text)`);
    const row = await runTogether(
      orm.em,
      [
        {
          name: "first",
          sql: `insert into notes select * from unnest(?::int[], ?::text[]) returning id`,
          params: [sqlArray([1, 2]), sqlArray(["a", "b"])],
        },
        { name: "unread", sql: `insert into notes values (?, ?)`, params: [3, "c"] },
      ],
      `select (select count(*) from first)::int as written`,
    );
    expect(row).toEqual({ written: 2 });
    expect(await orm.em.execute(`select id, body from notes order by id`)).toEqual([
      { id: 1, body: "a" },
      { id: 2, body: "b" },
      { id: 3, body: "c" },
    ]);
  });
});
