import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { UsageDeadLetter } from "@mkt/proto/events/v1/usage_dead_letter";
import type { Orm } from "./db.ts";
import { AppError } from "./errors.ts";
import { isUuid } from "./ids.ts";
import { decodeUsageEvent } from "./usage-messages.ts";
import { insertDeadLetters, openDeadLetters, type StoredDeadLetter } from "./usage-dead-letters.ts";

/** A letter whose bytes decoded, on its way to being written again. */
export interface ReplayItem {
  letter: StoredDeadLetter;
  event: UsageCompleted;
}

/** What a consumer does with its letters' events on replay: the rest of a replay is the same for every consumer. */
export interface ReplayWriter {
  /** Why an event can never be written as it is (it stays a letter without a try), or undefined. */
  refuse?(event: UsageCompleted): string | undefined;
  /**
   * Writes the items' events through the consumer's own write and marks their letters replayed;
   * rejects having written none of them. Resolves with the ids of the letters it replayed.
   */
  write(items: readonly ReplayItem[]): Promise<readonly string[]>;
  /** Items written at once; a part that fails is written one item at a time. */
  batchSize: number;
}

/** What ReplayUsageDeadLetters answers (billing's and registry's replies have this shape). */
export interface ReplayOutcome {
  replayed: number;
  failed: UsageDeadLetter[];
}

/** ListUsageDeadLetters of any consumer: its letters not replayed yet, oldest first (at most 1,000). */
export async function listDeadLetters(orm: Orm): Promise<{ letters: UsageDeadLetter[] }> {
  return { letters: (await openDeadLetters(orm)).map(deadLetterMessage) };
}

/**
 * ReplayUsageDeadLetters of any consumer: decodes the named letters (every open one when `ids` is
 * empty) and has `writer` write them, a part at a time. A letter whose bytes still do not decode,
 * that the writer refuses, or whose write still fails stays open with its new reason (`replay:
 * ...`) and one more attempt; the reply lists it.
 */
export async function replayDeadLetters(
  orm: Orm,
  ids: readonly string[],
  writer: ReplayWriter,
): Promise<ReplayOutcome> {
  const bad = ids.find((id) => !isUuid(id));
  if (bad !== undefined) throw new AppError("invalid_request", `${bad} is not a dead letter id`, { param: "ids" });
  const letters = await openDeadLetters(orm, ids.length > 0 ? ids : undefined);
  const failed = new Map<StoredDeadLetter, string>();
  const ready: ReplayItem[] = [];
  for (const letter of letters) {
    try {
      const event = decodeUsageEvent(letter.data);
      const refused = writer.refuse?.(event);
      if (refused) failed.set(letter, refused);
      else ready.push({ letter, event });
    } catch (err) {
      failed.set(letter, `undecodable usage event: ${(err as Error).message}`);
    }
  }
  let replayed = 0;
  for (let start = 0; start < ready.length; start += writer.batchSize) {
    const part = ready.slice(start, start + writer.batchSize);
    try {
      replayed += (await writer.write(part)).length;
    } catch {
      for (const item of part) {
        await writer.write([item]).then(
          (done) => (replayed += done.length),
          (err: unknown) => failed.set(item.letter, err instanceof Error ? err.message : String(err)),
        );
      }
    }
  }
  // Still failing: the same row, its new reason and one more attempt, answered as stored.
  await insertDeadLetters(
    orm,
    [...failed].map(([letter, reason]) => ({
      subject: letter.subject,
      data: letter.data,
      reason: `replay: ${reason}`,
      attempts: letter.attempts + 1,
      ...(letter.requestId ? { requestId: letter.requestId } : {}),
    })),
  );
  const stillFailing =
    failed.size > 0
      ? await openDeadLetters(
          orm,
          [...failed.keys()].map((l) => l.id),
        )
      : [];
  return { replayed, failed: stillFailing.map(deadLetterMessage) };
}

function deadLetterMessage(letter: StoredDeadLetter): UsageDeadLetter {
  return {
    id: letter.id,
    requestId: letter.requestId ?? "",
    subject: letter.subject,
    reason: letter.reason,
    attempts: letter.attempts,
    firstSeenAt: letter.firstSeenAt.toISOString(),
    lastSeenAt: letter.lastSeenAt.toISOString(),
    data: Buffer.from(letter.data),
  };
}
