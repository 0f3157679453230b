import { randomBytes, randomUUID } from "node:crypto";
import { v7 as uuidV7 } from "uuid";

/** A new random UUID for entity and request ids. */
export function newId(): string {
  return randomUUID();
}

/** Random bytes drawn at once for request ids: 256 ids' worth. */
const POOL_BYTES = 16 * 256;
let pool: Uint8Array = new Uint8Array(0);
let pooled = 0;
/** The last id's time and 32-bit sequence, as uuid keeps them, so ids of one millisecond still sort. */
let lastMs = -Infinity;
let sequence = 0;

/**
 * A new UUIDv7, whose first 48 bits are the Unix time in milliseconds, so ids minted one after the
 * other sort by time: request ids land side by side in an index
 * (docs/adr/0045-usage-records-append.md), and an edge process's boot id tells billing which of
 * two processes under one edge id started last (docs/leases.md#incarnations).
 *
 * Its random bytes come from a pool filled 4 KiB at a time, as Node's randomUUID does: uuid's own
 * source asks the system generator for 16 bytes per id, which cost the edge about 2% of its CPU
 * per request. Given the bytes, uuid no longer keeps its monotonic sequence, so it is kept here
 * the same way: a new millisecond starts from random bits, an id in the same one adds 1.
 */
export function newTimeOrderedId(): string {
  if (pooled + 16 > pool.length) {
    pool = randomBytes(POOL_BYTES);
    pooled = 0;
  }
  const random = pool.subarray(pooled, (pooled += 16));
  const now = Date.now();
  if (now > lastMs) {
    lastMs = now;
    sequence = ((random[6]! & 0x7f) << 24) | (random[7]! << 16) | (random[8]! << 8) | random[9]!;
  } else {
    sequence = (sequence + 1) | 0;
    if (sequence === 0) lastMs += 1;
  }
  return uuidV7({ random, msecs: lastMs, seq: sequence });
}

/** A new request id (public as `chatcmpl-<id>`, `resp_<id>`): a newTimeOrderedId. */
export const newRequestId = newTimeOrderedId;

/** URL-safe random token with `bytes` of entropy (API keys, invite codes, session ids). */
export function randomToken(bytes = 32): string {
  return randomBytes(bytes).toString("base64url");
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Ids arrive as strings from other services and clients; a malformed one must never reach a uuid column. */
export function isUuid(value: string): boolean {
  return UUID_RE.test(value);
}

/** The time a UUIDv7 was minted (its first 48 bits, Unix milliseconds); undefined for any other id. */
export function uuidV7Time(id: string): Date | undefined {
  if (!isUuid(id) || id[14] !== "7") return undefined;
  return new Date(Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16));
}
