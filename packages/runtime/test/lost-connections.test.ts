import { EntitySchema } from "@mikro-orm/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freshDatabaseUrl } from "@mkt/testkit/env";
import { startPrivatePostgres, type PrivatePostgres } from "@mkt/testkit/postgres-server";
import { openDatabase, type Orm } from "../src/db.ts";
import { isDependencyOutage } from "../src/dependency-outage.ts";
import { createLogger } from "../src/logger.ts";
import { pipelinedTransaction } from "../src/pipelined-transaction.ts";

// Transactions cut by a PostgreSQL that stops under them, on a pool of two connections: before
// releaseLostConnections, each one kept its pool slot for good and the next query waited forever.

const Counter = new EntitySchema<{ name: string; value: number }>({
  name: "Counter",
  tableName: "counters",
  properties: { name: { type: "string", primary: true }, value: { type: "integer" } },
});

let postgres: PrivatePostgres;
let orm: Orm;
beforeAll(async () => {
  postgres = await startPrivatePostgres();
  orm = await openDatabase({
    url: await freshDatabaseUrl(postgres.url),
    schema: "public",
    entities: [Counter],
    migrations: [],
    migrate: false,
    poolMax: 2,
    log: createLogger("lost-connections-test", "silent"),
  });
  await orm.em.execute(`create table counters (name text primary key, value int not null)`);
});
afterAll(async () => {
  await postgres?.start();
  await orm?.close();
  await postgres?.close();
});

/** A transaction that holds its connection across a pause, as a handler waiting on a call does. */
function slowTransaction(): Promise<unknown> {
  return orm.em.fork().transactional(async (em) => {
    await em.execute(`insert into counters values (?, 1) on conflict (name) do update set value = counters.value + 1`, [
      "slow",
    ]);
    await new Promise((resolve) => setTimeout(resolve, 500));
    await em.execute(`select 1`);
  });
}

describe("transactions cut by a PostgreSQL outage", () => {
  it("fail as an outage, give their connections back, and the pool serves again once it is back", async () => {
    const cut = [slowTransaction(), slowTransaction(), slowTransaction(), slowTransaction()].map((t) =>
      t.then(
        () => undefined,
        (err: unknown) => err,
      ),
    );
    await new Promise((resolve) => setTimeout(resolve, 150));
    await postgres.stop();
    const errors = await Promise.all(cut);
    // Two ran when it stopped; two waited for a connection and then found none.
    for (const err of errors) expect(isDependencyOutage(err), String(err)).toBe(true);
    const whileDown = await orm.em
      .fork()
      .execute(`select 1`)
      .catch((err: unknown) => err);
    expect(isDependencyOutage(whileDown)).toBe(true);

    await postgres.start();
    const back = Date.now();
    // Both slots are free: two transactions at once, and a pipelined one, all succeed at once.
    let timer: NodeJS.Timeout | undefined;
    const stuck = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error("the pool did not serve within 5 s of the database's return")), 5_000);
    });
    const recovered = Promise.all([
      slowTransaction(),
      slowTransaction(),
      pipelinedTransaction(orm, async (tx) => {
        await tx.first({ sql: `select 1`, params: [] });
        await tx.last({ sql: `select 2`, params: [] });
      }),
    ]);
    await Promise.race([recovered, stuck]).finally(() => clearTimeout(timer));
    expect(Date.now() - back).toBeLessThan(5_000);
    const [row] = await orm.em.execute(`select value from counters where name = 'slow'`);
    expect(row).toEqual({ value: 2 });
  }, 30_000);
});
