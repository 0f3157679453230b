import pg from "pg";

/** What billing's database wrote per request over a measured run. */
export interface DatabaseWrites {
  /** WAL the whole PostgreSQL cluster wrote (pg_stat_wal: only meaningful on an otherwise idle server). */
  walBytes: number;
  /** Heap rows of billing's tables inserted, updated or deleted. */
  rowWrites: number;
  /**
   * Index entries written, estimated from the same counters: an insert or an update that is not
   * HOT writes one entry in each of its table's indexes, a HOT update none (PostgreSQL 15 counts no
   * index writes of its own).
   */
  indexEntries: number;
  /** The share of updates that were HOT (no index entry written), per table that was updated. */
  hotShare: Record<string, number>;
}

interface TableCounters {
  inserts: number;
  updates: number;
  deletes: number;
  hot: number;
  indexes: number;
}

/** The tables whose HOT share the bench prints: what every lease call and settled batch updates. */
const HOT_TABLES = ["leases", "lease_allowances", "wallets"];

/**
 * Watches billing's tables (`pg_stat_user_tables` of schema `billing`, a monthly partition counted
 * as its own table) and the cluster's WAL from now; `stop(requests)` gives what they wrote per
 * request. PostgreSQL's backends report their counters about once a second while busy, so both
 * readings trail the run by about as much: taken while the load runs, the two lags cancel out.
 */
export async function watchDatabase(databaseUrl: string): Promise<{ stop(requests: number): Promise<DatabaseWrites> }> {
  const db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
  const before = await read(db);
  return {
    async stop(requests) {
      try {
        const after = await read(db);
        return perRequest(before, after, Math.max(1, requests));
      } finally {
        await db.end();
      }
    },
  };
}

async function read(db: pg.Client): Promise<{ wal: number; tables: Map<string, TableCounters> }> {
  const { rows } = await db.query<{
    relname: string;
    ins: string;
    upd: string;
    del: string;
    hot: string;
    indexes: string;
  }>(
    `select s.relname, s.n_tup_ins as ins, s.n_tup_upd as upd, s.n_tup_del as del, s.n_tup_hot_upd as hot,
       (select count(*) from pg_index i where i.indrelid = s.relid) as indexes
     from pg_stat_user_tables s where s.schemaname = 'billing'`,
  );
  const [wal] = (await db.query<{ bytes: string }>(`select wal_bytes as bytes from pg_stat_wal`)).rows;
  const tables = new Map(
    rows.map((r) => [
      r.relname,
      { inserts: +r.ins, updates: +r.upd, deletes: +r.del, hot: +r.hot, indexes: +r.indexes },
    ]),
  );
  return { wal: Number(wal?.bytes ?? 0), tables };
}

function perRequest(
  before: Awaited<ReturnType<typeof read>>,
  after: Awaited<ReturnType<typeof read>>,
  requests: number,
): DatabaseWrites {
  let rows = 0;
  let entries = 0;
  const hotShare: Record<string, number> = {};
  for (const [table, now] of after.tables) {
    const was = before.tables.get(table) ?? { inserts: 0, updates: 0, deletes: 0, hot: 0, indexes: now.indexes };
    const inserts = now.inserts - was.inserts;
    const updates = now.updates - was.updates;
    const hot = now.hot - was.hot;
    rows += inserts + updates + (now.deletes - was.deletes);
    entries += (inserts + updates - hot) * now.indexes;
    if (HOT_TABLES.includes(table) && updates > 0) hotShare[table] = hot / updates;
  }
  return {
    walBytes: (after.wal - before.wal) / requests,
    rowWrites: rows / requests,
    indexEntries: entries / requests,
    hotShare,
  };
}

/** "1,234 WAL bytes, 4.3 rows, 9.1 index entries (est.); HOT leases 98%, wallets 100%". */
export function databaseLine(w: DatabaseWrites): string {
  const hot = Object.entries(w.hotShare)
    .map(([table, share]) => `${table} ${(share * 100).toFixed(0)}%`)
    .join(", ");
  return (
    `${Math.round(w.walBytes).toLocaleString("en-US")} WAL bytes, ${w.rowWrites.toFixed(2)} rows, ` +
    `${w.indexEntries.toFixed(2)} index entries (est.) per request; HOT updates ${hot || "none"}`
  );
}
