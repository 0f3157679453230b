import { createHash } from "node:crypto";

/**
 * How accounts stores random secrets (API keys, invite codes, session tokens): SHA-256 hex.
 * No salt is needed: each secret has at least 192 random bits, so there is nothing to
 * brute-force, and an unsalted hash can be looked up by index.
 */
export function hashSecret(secret: string): string {
  return createHash("sha256").update(secret).digest("hex");
}
