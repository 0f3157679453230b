import { randomToken } from "./ids.ts";

/** Every API key starts with this, so scanners and people recognise a leaked one. */
export const API_KEY_PREFIX = "mk_";

/** A well-formed key: the prefix and 43 base64url characters (32 random bytes). */
const API_KEY_RE = /^mk_[A-Za-z0-9_-]{43}$/;

/**
 * A new API key secret: `mk_` + base64url of 32 random bytes (256 bits). Accounts issues normal
 * keys with it; billing draws a subscription's scoped key with it too, so the saga can seal the
 * secret before asking accounts to store its hash
 * (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md).
 */
export function newApiKey(): string {
  return API_KEY_PREFIX + randomToken(32);
}

/** True when `value` has exactly the shape `newApiKey` produces. */
export function isWellFormedApiKey(value: string): boolean {
  return API_KEY_RE.test(value);
}
