import { sqlArray, type ArrayElement } from "./batch-statement.ts";
import type { Em } from "./context.ts";

/**
 * How a column of two rows with the same key merges: `sum` adds them, `last` keeps the later
 * row's, `set` the later row's unless it is null (null: this write leaves the column as it is).
 */
export type ColumnMerge = "sum" | "last" | "set";

/**
 * A write made of rows that one statement applies together (over arrays, as settlement does):
 * `sql` gets the rows as `v`, a FROM item with the shape's columns. Rows with the same key merge
 * before they are sent (`merge`: one rule for every other column, or one per column after the
 * key), since an UPDATE … FROM applies only one of several rows matching the same target row: a
 * lease call that changes a row several times writes it once. Every shape's writes commute with
 * each other and with any other write of the same transaction: increments, or values no other
 * write sets.
 */
export interface RowShape {
  /** Column names and PostgreSQL types, in row order. */
  columns: ReadonlyArray<readonly [name: string, type: string]>;
  /** How many leading columns identify the target row. */
  keyColumns: number;
  merge: ColumnMerge | readonly ColumnMerge[];
  sql: (v: string) => string;
}

interface Batch {
  /** Statements in issue order, values inlined. */
  statements: string[];
  /** Each shape's rows by key. */
  rows: Map<RowShape, Map<string, ArrayElement[]>>;
  /** Sends what is held back (the batch's flush). */
  flush: () => Promise<void>;
}

const batches = new WeakMap<Em, Batch>();

/** The FROM item of a shape's rows (bound as one array parameter per column) and its parameters. */
function rowsOf(shape: RowShape, rows: ArrayElement[][]): { from: string; params: string[] } {
  const columns = shape.columns.map(([, type]) => `?::${type}[]`).join(", ");
  const names = shape.columns.map(([name]) => name).join(", ");
  return {
    from: `unnest(${columns}) as v(${names})`,
    params: shape.columns.map((_, i) => sqlArray(rows.map((row) => row[i]!))),
  };
}

/**
 * A view of `em` (a transaction's) whose writes are held back and sent together, as one
 * multi-statement query, before its next `execute` and at `flush`: one round trip for every write
 * between two reads instead of one each, and one statement per shape of rows instead of one per
 * row. A heartbeat applies dozens of leases, each with a few small updates; the round trips, not
 * the statements, were billing's cost (each one a socket write and a wake-up of PostgreSQL's
 * backend). A read never runs before a write issued ahead of it, so the transaction reads its own
 * writes as it would unbatched; statements (`write`) keep their order and run before the shapes'
 * rows (`writeRow`), which commute with them. Nothing may be read from a held-back write (no
 * RETURNING, no affected count): neither returns anything.
 */
export function batchWrites(em: Em): { em: Em; flush(): Promise<void> } {
  const platform = em.getPlatform();
  const flush = async () => {
    const sql = [...batch.statements];
    for (const [shape, byKey] of batch.rows) {
      const { from, params } = rowsOf(shape, [...byKey.values()]);
      sql.push(platform.formatQuery(shape.sql(from), params));
    }
    batch.statements.length = 0;
    batch.rows.clear();
    // Values are inlined (as em.execute itself does), so the batch goes as one simple query.
    if (sql.length > 0) await em.execute(sql.join(";\n"));
  };
  const batch: Batch = { statements: [], rows: new Map(), flush };
  const batching = new Proxy(em, {
    get(target, property, receiver) {
      if (property === "execute") {
        return async (...args: Parameters<Em["execute"]>) => {
          await flush();
          return target.execute(...args);
        };
      }
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  batches.set(batching, batch);
  return { em: batching, flush };
}

/**
 * Sends the writes held back on `em` (one from batchWrites; nothing on a plain one), for a read
 * that does not go through `execute`: a typed query (billing-db.ts) runs on the transaction's
 * connection directly, and must still see the transaction's own writes.
 */
export async function sendHeldWrites(em: Em): Promise<void> {
  await batches.get(em)?.flush();
}

/**
 * Runs a statement whose result nobody reads: at once on a plain entity manager, held back on one
 * from batchWrites (sent before its next read, or at its flush).
 */
export async function write(em: Em, sql: string, params: readonly unknown[]): Promise<void> {
  const batch = batches.get(em);
  if (!batch) {
    await em.execute(sql, [...params]);
    return;
  }
  batch.statements.push(em.getPlatform().formatQuery(sql, [...params]));
}

/** Writes one row of a shape: at once on a plain entity manager, merged into the batch's on one from batchWrites. */
export async function writeRow(em: Em, shape: RowShape, row: ArrayElement[]): Promise<void> {
  const batch = batches.get(em);
  if (!batch) {
    const { from, params } = rowsOf(shape, [row]);
    await em.execute(shape.sql(from), params);
    return;
  }
  let byKey = batch.rows.get(shape);
  if (!byKey) batch.rows.set(shape, (byKey = new Map()));
  const key = JSON.stringify(
    row.slice(0, shape.keyColumns).map((v) => (v instanceof Date ? v.toISOString() : String(v))),
  );
  const earlier = byKey.get(key);
  byKey.set(key, earlier ? mergeRows(shape, earlier, row) : row);
}

function mergeRows(shape: RowShape, earlier: ArrayElement[], later: ArrayElement[]): ArrayElement[] {
  return later.map((value, i) => {
    if (i < shape.keyColumns) return value;
    const rule = typeof shape.merge === "string" ? shape.merge : shape.merge[i - shape.keyColumns];
    if (rule === "sum") return BigInt(earlier[i] as bigint) + BigInt(value as bigint);
    if (rule === "set") return value ?? earlier[i] ?? null;
    return value;
  });
}
