import { newApiKey } from "@mkt/runtime/api-key-format";
import { hashSecret } from "../secret-hash.ts";

/** Keys are `mk_` + base64url of 32 random bytes (43 characters): 256 bits, nothing to guess. */
const PREFIX_CHARS = 10;
const KEY_RE = /^mk_[A-Za-z0-9_-]{20,100}$/;

export interface KeySecret {
  /** The secret itself; returned to the caller once and never stored. */
  secret: string;
  /** Non-secret start of the key, shown in lists. */
  prefix: string;
  /** SHA-256 hex: what the database holds and Authenticate looks up. */
  hash: string;
}

/** What the database holds for a key, and what Authenticate looks up on every request. */
export function hashKey(secret: string): string {
  return hashSecret(secret);
}

export function newKeySecret(): KeySecret {
  return keySecret(newApiKey());
}

/** The stored parts of a given secret (a scoped key's secret is drawn by billing's saga). */
export function keySecret(secret: string): KeySecret {
  return { secret, prefix: secret.slice(0, PREFIX_CHARS), hash: hashKey(secret) };
}

/** Whether a presented string could be a key at all; anything else is refused without a query. */
export function looksLikeKey(value: string): boolean {
  return KEY_RE.test(value);
}
