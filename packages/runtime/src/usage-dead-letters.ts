import { createHash } from "node:crypto";
import type { Orm } from "./db.ts";

/** One usage event a consumer (billing, registry: each into its own table) could not decode, record or settle: kept, never dropped. */
export interface DeadLetter {
  /** Where it came from: the JetStream subject, or `grpc:RecordUsage`. */
  subject: string;
  /** The event's encoded bytes as they came (a whole message when even the batch did not decode). */
  data: Uint8Array;
  reason: string;
  /** Deliveries (or calls) it failed in. */
  attempts: number;
  /** Its request id, when it decoded far enough to have one. */
  requestId?: string;
}

/** A stored dead letter, as the admin lists it. */
export interface StoredDeadLetter {
  id: string;
  requestId: string | null;
  subject: string;
  data: Buffer;
  reason: string;
  attempts: number;
  firstSeenAt: Date;
  lastSeenAt: Date;
}

/** RecordUsage's letters name this as their subject. */
export const RECORD_USAGE_SUBJECT = "grpc:RecordUsage";

/** The row an event keeps however often it is dead-lettered: its request, or its bytes. */
const letterKey = (letter: DeadLetter) =>
  letter.requestId ? `request:${letter.requestId}` : `sha256:${createHash("sha256").update(letter.data).digest("hex")}`;

/**
 * Writes the letters in one transaction; the caller acks their messages only once this resolves.
 * An event dead-lettered again (a redelivery after a crash before the ack) updates its row: the
 * latest reason and bytes, its last sighting, the most attempts, open again if it was replayed.
 */
export async function insertDeadLetters(orm: Orm, letters: readonly DeadLetter[]): Promise<void> {
  if (letters.length === 0) return;
  await orm.em.fork().transactional(async (em) => {
    for (const letter of letters) {
      await em.execute(
        `insert into usage_dead_letters (letter_key, request_id, subject, data, reason, attempts)
         values (?, ?, ?, decode(?, 'hex'), ?, ?)
         on conflict (letter_key) do update set
           data = excluded.data, reason = excluded.reason, subject = excluded.subject,
           attempts = greatest(usage_dead_letters.attempts, excluded.attempts),
           last_seen_at = now(), replayed_at = null`,
        [
          letterKey(letter),
          letter.requestId ?? null,
          letter.subject,
          Buffer.from(letter.data).toString("hex"),
          letter.reason.slice(0, 2_000),
          Math.max(1, letter.attempts),
        ],
      );
    }
  });
}

/** Dead letters not replayed yet, oldest first (or the one with `id`, replayed or not). */
export async function openDeadLetters(orm: Orm, ids?: readonly string[]): Promise<StoredDeadLetter[]> {
  const rows = await orm.em.fork().execute<
    Array<{
      id: string;
      request_id: string | null;
      subject: string;
      data: Buffer;
      reason: string;
      attempts: number;
      first_seen_at: Date;
      last_seen_at: Date;
    }>
  >(
    `select id, request_id, subject, data, reason, attempts, first_seen_at, last_seen_at
     from usage_dead_letters where replayed_at is null ${ids ? "and id = any(?::uuid[])" : ""}
     order by first_seen_at, id limit 1000`,
    ids ? [`{${ids.join(",")}}`] : [],
  );
  return rows.map((row) => ({
    id: row.id,
    requestId: row.request_id,
    subject: row.subject,
    data: row.data,
    reason: row.reason,
    attempts: row.attempts,
    firstSeenAt: new Date(row.first_seen_at),
    lastSeenAt: new Date(row.last_seen_at),
  }));
}

/** Marks letters replayed (their events settled, or found settled). */
export async function markReplayed(orm: Orm, ids: readonly string[], at: Date): Promise<void> {
  if (ids.length === 0) return;
  await orm.em
    .fork()
    .execute(`update usage_dead_letters set replayed_at = ? where id = any(?::uuid[])`, [at, `{${ids.join(",")}}`]);
}

/**
 * Marks replayed those of the letters still open, inside the caller's transaction `em`, and
 * returns their ids: a replay that writes its figures in the same transaction writes each letter
 * once, however often (or however many replays at once) it is asked to.
 */
export async function claimDeadLetters(em: Orm["em"], ids: readonly string[], at: Date): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const rows = await em.execute<Array<{ id: string }>>(
    `update usage_dead_letters set replayed_at = ? where id = any(?::uuid[]) and replayed_at is null returning id`,
    [at, `{${ids.join(",")}}`],
  );
  return new Set(rows.map((row) => row.id));
}

/** How many letters wait for an operator (the `mkt_usage_dead_letters` gauge). */
export async function countOpenDeadLetters(orm: Orm): Promise<number> {
  const [row] = await orm.em
    .fork()
    .execute<Array<{ n: string }>>(`select count(*) as n from usage_dead_letters where replayed_at is null`);
  return Number(row?.n ?? 0);
}
