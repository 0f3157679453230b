import type { Orm } from "@mkt/runtime/db";

/** Rows per INSERT: a burst of fallbacks (NATS down under load) is written in few statements. */
const MAX_ROWS_PER_INSERT = 500;

interface Waiting {
  requestId: string;
  payload: Uint8Array;
  resolve(): void;
  reject(err: unknown): void;
}

/** A row being replayed: its encoded event and the request id that is its Nats-Msg-Id. */
export interface OutboxRow {
  requestId: string;
  payload: Buffer;
}

/**
 * Registry's usage outbox, the usage_outbox table (docs/usage-outbox.md): where a usage.completed
 * goes when JetStream does not ack it in time, and where replays take it from.
 */
export class UsageOutbox {
  readonly #orm: Orm;
  #waiting: Waiting[] = [];
  #writing = false;

  constructor(orm: Orm) {
    this.#orm = orm;
  }

  /**
   * Resolves once the event is committed. Group commit: events that arrive while an INSERT is
   * running wait for it and then go together in the next one, so N requests cut off from NATS at
   * once cost a few commits, not N.
   */
  add(requestId: string, payload: Uint8Array): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#waiting.push({ requestId, payload, resolve, reject });
      if (!this.#writing) void this.#writeWaiting();
    });
  }

  async #writeWaiting(): Promise<void> {
    this.#writing = true;
    while (this.#waiting.length > 0) {
      const batch = this.#waiting.splice(0, MAX_ROWS_PER_INSERT);
      try {
        await this.#orm.em.fork().execute(
          `insert into usage_outbox (request_id, payload) values ${batch.map(() => "(?, ?)").join(", ")}`,
          batch.flatMap((w) => [w.requestId, Buffer.from(w.payload)]),
        );
        for (const w of batch) w.resolve();
      } catch (err) {
        for (const w of batch) w.reject(err);
      }
    }
    this.#writing = false;
  }

  /**
   * Takes up to `limit` of the oldest rows no other replica is replaying, hands them to `publish`
   * and deletes those it acked, in one transaction: a row is deleted only once JetStream holds its
   * event, and a replica that dies mid-replay leaves its rows for the next pass. Returns how many
   * rows were taken and how many were acked.
   */
  async replay(
    limit: number,
    publish: (row: OutboxRow) => Promise<void>,
  ): Promise<{ taken: number; acked: number; firstError?: unknown }> {
    return this.#orm.em.fork().transactional(async (em) => {
      const rows = await em.execute<Array<{ id: string; request_id: string; payload: Buffer }>>(
        `select id, request_id, payload from usage_outbox order by id limit ? for update skip locked`,
        [limit],
      );
      const results = await Promise.allSettled(
        rows.map((r) => publish({ requestId: r.request_id, payload: r.payload })),
      );
      const acked = rows.filter((_, i) => results[i]?.status === "fulfilled").map((r) => r.id);
      if (acked.length > 0) {
        await em.execute(`delete from usage_outbox where id in (${acked.map(() => "?").join(", ")})`, acked);
      }
      const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
      return { taken: rows.length, acked: acked.length, ...(failed ? { firstError: failed.reason } : {}) };
    });
  }

  /** Rows waiting, all replicas' together. */
  async depth(): Promise<number> {
    const rows = await this.#orm.em.fork().execute<Array<{ n: string }>>(`select count(*) as n from usage_outbox`);
    return Number(rows[0]?.n ?? 0);
  }
}
