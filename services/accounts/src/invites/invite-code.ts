import { randomToken } from "@mkt/runtime/ids";

/** `inv_` + base64url of 24 random bytes: 192 bits, so codes cannot be guessed or enumerated. */
const INVITE_PREFIX = "inv_";
const INVITE_RE = /^inv_[A-Za-z0-9_-]{20,100}$/;

export function newInviteCode(): string {
  return INVITE_PREFIX + randomToken(24);
}

/** Whether a presented string could be a code at all; anything else is refused without a query. */
export function looksLikeInviteCode(value: string): boolean {
  return INVITE_RE.test(value);
}
