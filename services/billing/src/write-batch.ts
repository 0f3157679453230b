import type { Em } from "./context.ts";

/** The statements a batching entity manager holds back, values already inlined. */
const pending = new WeakMap<Em, string[]>();

/**
 * A view of `em` (a transaction's) whose `write`s are held back and sent together, as one
 * multi-statement query, before its next `execute` and at `flush`: one round trip for every write
 * between two reads instead of one each. A heartbeat applies dozens of leases, each with a few
 * small updates; the round trips, not the statements, were billing's cost (each one a socket
 * write and a wake-up of PostgreSQL's backend). Order is kept: every statement runs in the order
 * it was issued, and a read never runs before a write issued ahead of it, so the transaction
 * reads its own writes as it would unbatched. Nothing may be read from a held-back write (no
 * RETURNING, no affected count): `write` returns nothing.
 */
export function batchWrites(em: Em): { em: Em; flush(): Promise<void> } {
  const queue: string[] = [];
  const flush = async () => {
    if (queue.length === 0) return;
    // Values are inlined (as em.execute itself does), so the batch goes as one simple query.
    const sql = queue.join(";\n");
    queue.length = 0;
    await em.execute(sql);
  };
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
  pending.set(batching, queue);
  return { em: batching, flush };
}

/**
 * Runs a statement whose result nobody reads: at once on a plain entity manager, held back on one
 * from batchWrites (sent before its next read, or at its flush).
 */
export async function write(em: Em, sql: string, params: readonly unknown[]): Promise<void> {
  const queue = pending.get(em);
  if (!queue) {
    await em.execute(sql, [...params]);
    return;
  }
  queue.push(em.getPlatform().formatQuery(sql, [...params]));
}
