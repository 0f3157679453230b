import { EntitySchema } from "@mikro-orm/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dropDatabase, freshDatabaseUrl } from "@mkt/testkit/env";
import { openDatabase, type Orm } from "../src/db.ts";
import { createLogger } from "../src/logger.ts";
import { pipelinedTransaction } from "../src/pipelined-transaction.ts";

// MikroORM wants an entity; the tests use raw SQL on the table it maps.
const Counter = new EntitySchema<{ name: string; value: number }>({
  name: "Counter",
  tableName: "counters",
  properties: { name: { type: "string", primary: true }, value: { type: "integer" } },
});

let url: string;
let orm: Orm;
beforeAll(async () => {
  url = await freshDatabaseUrl();
  orm = await openDatabase({
    url,
    schema: "public",
    entities: [Counter],
    migrations: [],
    migrate: false,
    poolMax: 1, // one connection: a transaction left open on it would show in the next test
    log: createLogger("pipelined-test", "silent"),
  });
  await orm.em.execute(`create table counters (name text primary key, value int not null check (value >= 0))`);
});
afterAll(async () => {
  await orm?.close(true);
  if (url) await dropDatabase(url);
});

const value = async (name: string) =>
  (await orm.em.execute(`select value from counters where name = ?`, [name]))[0]?.value as number | undefined;

describe("pipelinedTransaction", () => {
  it("commits what both messages did and returns each statement's rows, parameters inlined safely", async () => {
    const name = "it's a 'quoted' name";
    const rows = await pipelinedTransaction(orm, async (tx) => {
      const [inserted, read] = await tx.first(
        { sql: `insert into counters (name, value) values (?, ?) returning value`, params: [name, 1] },
        { sql: `select value from counters where name = ? for update`, params: [name] },
      );
      expect(inserted).toEqual([{ value: 1 }]);
      const [updated] = await tx.last({
        sql: `update counters set value = value + ? where name = ? returning value`,
        params: [read![0]!.value, name],
      });
      return updated;
    });
    expect(rows).toEqual([{ value: 2 }]);
    expect(await value(name)).toBe(2);
  });

  it("sends one transaction: a statement in the last message that fails undoes the first message too", async () => {
    await expect(
      pipelinedTransaction(orm, async (tx) => {
        await tx.first({ sql: `insert into counters (name, value) values (?, ?)`, params: ["undone", 5] });
        // The check constraint fails: COMMIT, in the same message, never runs.
        await tx.last({ sql: `update counters set value = value - 10 where name = ?`, params: ["undone"] });
      }),
    ).rejects.toMatchObject({ code: "23514" });
    expect(await value("undone")).toBeUndefined();
    // The pool's only connection was rolled back, not left in an aborted transaction.
    expect(await value("it's a 'quoted' name")).toBe(2);
  });

  it("rolls back when the work fails between the messages or never sends the last one", async () => {
    await expect(
      pipelinedTransaction(orm, async (tx) => {
        await tx.first({ sql: `insert into counters (name, value) values (?, ?)`, params: ["thrown", 1] });
        throw new Error("refused in between");
      }),
    ).rejects.toThrow("refused in between");
    await expect(
      pipelinedTransaction(orm, async (tx) => {
        await tx.first({ sql: `insert into counters (name, value) values (?, ?)`, params: ["left open", 1] });
      }),
    ).rejects.toThrow("without last()");
    expect(await value("thrown")).toBeUndefined();
    expect(await value("left open")).toBeUndefined();
  });

  it("refuses messages out of order", async () => {
    await expect(pipelinedTransaction(orm, (tx) => tx.last())).rejects.toThrow("needs the transaction first() opened");
    await expect(
      pipelinedTransaction(orm, async (tx) => {
        await tx.first();
        await tx.first();
      }),
    ).rejects.toThrow("called once");
    expect(await value("it's a 'quoted' name")).toBe(2);
  });
});
