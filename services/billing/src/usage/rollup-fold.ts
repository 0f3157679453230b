import type { Logger } from "@mkt/runtime/logger";
import type { Em } from "../context.ts";
import { int8 } from "../context.ts";
import { ROLLUPS, type Rollup } from "./rollup-queue.ts";

/** Queue rows folded per transaction: a backlog is folded in steps that each hold their locks briefly. */
const FOLD_ROWS = 200;

/**
 * The upsert adding the deltas of the queue rows `taken` (a CTE of deleted queue rows) to one
 * rollup, summed per rollup row and written in key order, so two folders (two billing replicas,
 * or the worker and a key limit being set) lock a rollup's rows in the same order.
 */
function foldInto(rollup: Rollup, taken: string): string {
  const keys = rollup.keys.map(([name]) => name).join(", ");
  const positions = rollup.keys.map((_, i) => i + 1).join(", ");
  return `insert into ${rollup.table} as r (${keys}, ${rollup.sums.join(", ")})
    select ${keys}, ${rollup.sums.map((s) => `sum(${s})`).join(", ")}
    from ${taken} q, unnest(q.${rollup.queued}) as x
    group by ${positions} order by ${positions}
    on conflict (${keys}) do update set ${rollup.sums.map((s) => `${s} = r.${s} + excluded.${s}`).join(", ")}`;
}

/**
 * Folds up to FOLD_ROWS queued batches' rollup deltas into the rollups, inside the caller's
 * transaction, and deletes them from the queue: returns how many it folded. Each rollup is one
 * upsert of the rows' deltas summed, so a bucket many batches touched is written once.
 *
 * `skipLocked` (the worker): rows another folder holds are left to it, so replicas share the
 * queue without waiting. Without it (a key's spend limit being set) the fold waits for a folder
 * in flight, after whose commit its rows are gone: once it returns, everything settled before it
 * began is in the rollups.
 */
export async function foldQueued(em: Em, { skipLocked }: { skipLocked: boolean }): Promise<number> {
  const [taken] = await em.execute(
    `with taken as (
       delete from usage_rollup_queue where id in (
         select id from usage_rollup_queue order by id limit ${FOLD_ROWS} for update${skipLocked ? " skip locked" : ""})
       returning ${ROLLUPS.map((r) => r.queued).join(", ")}
     ),
     ${ROLLUPS.map((rollup, i) => `folded_${i} as (${foldInto(rollup, "taken")})`).join(",\n")}
     select count(*) as n from taken`,
  );
  return Number(int8(taken?.n));
}

/** Folds the whole queue (one transaction per FOLD_ROWS rows); returns how many rows it folded. */
export async function foldAll(fork: () => Em, options: { skipLocked: boolean }): Promise<number> {
  let total = 0;
  for (;;) {
    const n = await fork().transactional((em) => foldQueued(em, options));
    total += n;
    if (n < FOLD_ROWS) return total;
  }
}

export interface RollupFolder {
  /** Folds everything queued now (tests read reports right after a request). */
  foldNow(): Promise<number>;
  stop(): Promise<void>;
}

/**
 * The fold worker: every `intervalMs` folds the queue into the rollups. Reports read the rollups,
 * so they trail settlement by up to about one interval (docs/settlement.md); one worker per billing
 * replica, sharing the queue through SKIP LOCKED.
 */
export function startRollupFolder(fork: () => Em, intervalMs: number, log: Logger): RollupFolder {
  // One fold at a time in this process: the next waits for the one in flight.
  let running: Promise<unknown> = Promise.resolve();
  const fold = (skipLocked: boolean) => {
    const folded = running.then(() => foldAll(fork, { skipLocked }));
    running = folded.catch((err: unknown) => log.error({ err }, "rollup fold failed; retrying at the next interval"));
    return folded;
  };
  const timer = setInterval(() => void fold(true).catch(() => undefined), intervalMs);
  timer.unref();
  return {
    foldNow: () => fold(false),
    async stop() {
      clearInterval(timer);
      // What the last batches queued is folded before the process goes.
      await fold(true).catch(() => undefined);
    },
  };
}
