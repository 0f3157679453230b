import { randomBytes, randomUUID } from "node:crypto";
import { v7 as uuidV7 } from "uuid";

/** A new random UUID for entity and request ids. */
export function newId(): string {
  return randomUUID();
}

/**
 * A new request id: a UUIDv7, whose first 48 bits are the Unix time in milliseconds, so ids minted
 * one after the other sort by time and land side by side in an index (docs/adr/0045-usage-records-append.md).
 * Its public shape is any UUID's: `chatcmpl-<id>`, `resp_<id>`.
 */
export function newRequestId(): string {
  return uuidV7();
}

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
