import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, type Orm } from "@mkt/runtime/db";
import { createLogger } from "@mkt/runtime/logger";
import { dropDatabase, freshDatabaseUrl } from "@mkt/testkit/env";
import { batchWrites, write, writeRow, type RowShape } from "../src/write-batch.ts";

// A heartbeat's writes go to PostgreSQL together: the transaction must still read its own writes,
// in the order they were issued, and carry any value unchanged.
let orm: Orm;
let url: string;
beforeAll(async () => {
  url = await freshDatabaseUrl();
  orm = await openDatabase({
    url,
    schema: "write_batch_test",
    entities: [],
    migrations: [],
    migrate: true,
    log: createLogger("write-batch-test", "silent"),
  });
  await orm.em.execute(`create table write_batch_test.counters (id text primary key, n bigint not null, note text)`);
});
afterAll(async () => {
  await orm?.close();
  await dropDatabase(url);
});

const counters = async (em = orm.em.fork()) =>
  (await em.execute(`select id, n::text as n, note from write_batch_test.counters order by id`)).map((r) => ({
    id: r.id as string,
    n: r.n as string,
    note: r.note as string | null,
  }));

describe("batchWrites", () => {
  it("holds writes back until the next read, runs them in order, and the read sees them", async () => {
    await orm.em.fork().transactional(async (transaction) => {
      const { em, flush } = batchWrites(transaction);
      await write(em, `insert into write_batch_test.counters (id, n, note) values (?, ?, ?)`, [
        "a",
        1n,
        'it\'s; a "note" ?',
      ]);
      await write(em, `update write_batch_test.counters set n = n * 10 where id = ?`, ["a"]);
      // Held back: another connection, and this transaction's own connection, see nothing yet.
      expect(await counters()).toEqual([]);
      expect(await counters(transaction)).toEqual([]);
      // A read through the batching view sends them first, in order (1 then × 10, not 10 then + 1).
      expect(await counters(em)).toEqual([{ id: "a", n: "10", note: 'it\'s; a "note" ?' }]);
      await write(em, `update write_batch_test.counters set n = n + ? where id = ?`, [5n, "a"]);
      await flush();
      expect(await counters(transaction)).toEqual([{ id: "a", n: "15", note: 'it\'s; a "note" ?' }]);
      await flush(); // nothing held: no statement
    });
    expect(await counters()).toEqual([{ id: "a", n: "15", note: 'it\'s; a "note" ?' }]);
  });

  it("writes at once on a plain entity manager, and a failed batch rolls the transaction back", async () => {
    await write(orm.em.fork(), `update write_batch_test.counters set n = n + 1 where id = ?`, ["a"]);
    expect((await counters())[0]!.n).toBe("16");
    const failing = orm.em.fork().transactional(async (transaction) => {
      const { em, flush } = batchWrites(transaction);
      await write(em, `update write_batch_test.counters set n = n + 1 where id = ?`, ["a"]);
      await write(em, `insert into write_batch_test.counters (id, n) values (?, null)`, ["b"]);
      await flush();
    });
    await expect(failing).rejects.toThrow(/null value/);
    expect(await counters()).toEqual([{ id: "a", n: "16", note: 'it\'s; a "note" ?' }]);
  });

  it("applies a shape's rows in one statement, merged by key, after the statements issued with them", async () => {
    const added: RowShape = {
      columns: [
        ["id", "text"],
        ["delta", "int8"],
      ],
      keyColumns: 1,
      merge: "sum",
      sql: (v) => `update write_batch_test.counters c set n = c.n + v.delta from ${v} where c.id = v.id`,
    };
    const noted: RowShape = {
      columns: [
        ["id", "text"],
        ["note", "text"],
      ],
      keyColumns: 1,
      merge: "last",
      sql: (v) => `update write_batch_test.counters c set note = v.note from ${v} where c.id = v.id`,
    };
    await orm.em.fork().transactional(async (transaction) => {
      const { em, flush } = batchWrites(transaction);
      // The row the shapes update is inserted by a statement issued after the first of them.
      await writeRow(em, added, ["c", 5n]);
      await write(em, `insert into write_batch_test.counters (id, n) values (?, ?)`, ["c", 100n]);
      // Two rows of one key would update the row once in a single UPDATE … FROM: they are summed first.
      await writeRow(em, added, ["c", -2n]);
      await writeRow(em, added, ["a", 4n]);
      await writeRow(em, noted, ["c", "first"]);
      await writeRow(em, noted, ["c", 'la"st, {x}']);
      await flush();
    });
    expect(await counters()).toEqual([
      { id: "a", n: "20", note: 'it\'s; a "note" ?' },
      { id: "c", n: "103", note: 'la"st, {x}' },
    ]);
    // On a plain entity manager a row is written at once.
    await writeRow(orm.em.fork(), added, ["a", 1n]);
    expect((await counters())[0]!.n).toBe("21");
  });
});
