import type { Orm } from "./db.ts";

/** One SQL statement with `?` placeholders and its parameters, as `em.execute` takes them. */
export interface Statement {
  sql: string;
  params: readonly unknown[];
}

export type Row = Record<string, unknown>;

/** Runs one statement on its own through an entity manager (outside a pipelined transaction). */
export function executeStatement(em: Orm["em"], statement: Statement): Promise<Row[]> {
  return em.execute(statement.sql, [...statement.params]);
}

/** The two messages of a pipelined transaction (see pipelinedTransaction). */
export interface Pipeline {
  /** Sends BEGIN and these statements in one message; returns each statement's rows. */
  first(...statements: Statement[]): Promise<Row[][]>;
  /** Sends these statements and COMMIT in one message; returns each statement's rows. */
  last(...statements: Statement[]): Promise<Row[][]>;
}

/**
 * Runs a transaction in two messages to PostgreSQL: BEGIN travels with the first statements and
 * COMMIT with the last ones, where `em.transactional` sends BEGIN and COMMIT alone. Each message is
 * a round trip that wakes the server and then this process, about half a millisecond apart when
 * they are idle, so a hot-path transaction of two statements takes two round trips instead of four.
 *
 * The statements are rendered exactly as `em.execute` renders them (MikroORM inlines the
 * parameters), and node-postgres sends a query without parameters with the simple query protocol,
 * which takes several statements in one message. A statement that fails skips the rest of its
 * message (COMMIT included), and the transaction is rolled back before the connection goes back to
 * the pool; so is one that `work` leaves without calling `last`.
 */
export async function pipelinedTransaction<T>(orm: Orm, work: (tx: Pipeline) => Promise<T>): Promise<T> {
  const pool = await orm.em.getConnection().getNativeClient();
  const platform = orm.em.getPlatform();
  const client = await pool.connect();
  // An object, not a variable: the transaction's state changes inside the closures below.
  const progress = { state: "new" as "new" | "open" | "committed" };
  const send = async (texts: string[]): Promise<Row[][]> => {
    const results = (await client.query(texts.join(";\n"))) as unknown;
    const list = (Array.isArray(results) ? results : [results]) as Array<{ rows: Row[] }>;
    return list.map((result) => result.rows);
  };
  const render = (statements: Statement[]) => statements.map((s) => platform.formatQuery(s.sql, s.params as unknown[]));
  const tx: Pipeline = {
    async first(...statements) {
      if (progress.state !== "new") throw new Error("first() is called once, before last()");
      progress.state = "open";
      return (await send(["begin", ...render(statements)])).slice(1);
    },
    async last(...statements) {
      if (progress.state !== "open") throw new Error("last() needs the transaction first() opened");
      const rows = await send([...render(statements), "commit"]);
      progress.state = "committed";
      return rows.slice(0, -1);
    },
  };
  let broken: Error | undefined;
  try {
    const result = await work(tx);
    if (progress.state === "open") throw new Error("a pipelined transaction was left without last()");
    return result;
  } catch (err) {
    if (progress.state === "open") {
      await client.query("rollback").catch((rollbackFailed: unknown) => {
        broken = rollbackFailed instanceof Error ? rollbackFailed : new Error(String(rollbackFailed));
      });
    }
    throw err;
  } finally {
    // A connection whose rollback failed is closed, not reused.
    client.release(broken);
  }
}
