import { randomBytes, randomUUID } from "node:crypto";

/** A new random UUID for entity and request ids. */
export function newId(): string {
  return randomUUID();
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
