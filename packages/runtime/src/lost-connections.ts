import type pg from "pg";

/**
 * Makes a pool give back, by itself, a checked-out connection whose server went away.
 *
 * Kysely (under MikroORM) never releases a transaction's connection when its BEGIN, COMMIT or
 * ROLLBACK fails (kysely-org/kysely#1990), and on a connection PostgreSQL dropped, every one of
 * them fails. Each transaction running when the database stopped thus kept a pool slot for good:
 * with the pool's ten slots gone the service waited forever for a connection instead of
 * recovering when the database came back (docs/adr/0027-dependency-outage-is-503.md). Here, once a
 * checked-out client's connection has ended, it is released with the error on the next turn of the
 * event loop unless its holder has released it by then; the pool discards a released client that is
 * not queryable. Release is made idempotent, so a holder that does release later (every path but
 * the three above) does no harm.
 */
export function releaseLostConnections(pool: pg.Pool): void {
  const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
  const guarded = async (): Promise<pg.PoolClient> => {
    const client = await connect();
    const release = client.release.bind(client);
    let released = false;
    const giveBack = (err?: Error | boolean) => {
      if (released) return;
      released = true;
      client.off("end", onLost);
      client.off("error", onLost);
      release(err);
    };
    const onLost = (err?: Error) =>
      setImmediate(() => giveBack(err ?? new Error("the PostgreSQL connection ended while checked out")));
    client.once("end", onLost);
    client.once("error", onLost);
    client.release = giveBack;
    return client;
  };
  // Kysely and pipelinedTransaction call connect() without a callback; a caller that passes one
  // gets the pool's own behaviour.
  pool.connect = ((callback?: unknown) =>
    callback === undefined ? guarded() : (connect as (cb: unknown) => void)(callback)) as typeof pool.connect;
}
