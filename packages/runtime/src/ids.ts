import { randomBytes, randomUUID } from "node:crypto";

/** A new random UUID for entity and request ids. */
export function newId(): string {
  return randomUUID();
}

/** URL-safe random token with `bytes` of entropy (API keys, invite codes, session ids). */
export function randomToken(bytes = 32): string {
  return randomBytes(bytes).toString("base64url");
}
