import { AppError } from "@mkt/runtime/errors";

const MAX_EMAIL_CHARS = 254;

// One '@', a local part without spaces, control characters or characters that only appear in
// quoted forms, and a dotted domain of letters, digits and inner hyphens (IDNs in punycode).
const EMAIL_RE =
  // eslint-disable-next-line no-control-regex
  /^[^\s@<>()[\]\\,;:"\x00-\x1f\x7f]{1,64}@(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$/;

/** The address as stored for display: surrounding whitespace is never part of it. */
export function cleanEmail(email: string): string {
  return email.trim();
}

/** What uniqueness and login compare: addresses differing only in case are one account. */
export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

/** Refuses anything that is not a plausible e-mail address. */
export function validateEmail(email: string): void {
  const cleaned = cleanEmail(email);
  if (cleaned.length === 0 || cleaned.length > MAX_EMAIL_CHARS || !EMAIL_RE.test(cleaned)) {
    throw new AppError("invalid_request", "email must be a valid e-mail address.", { param: "email" });
  }
}

/**
 * Refuses a log-in address that no account can have: one holding a control character (a NUL
 * would also reach Postgres, which cannot store one: a 500) or longer than any stored address.
 * Looser than validateEmail on purpose: it says nothing about whether an account exists.
 */
export function validateLoginEmail(email: string): void {
  // eslint-disable-next-line no-control-regex
  if (email.length > MAX_EMAIL_CHARS * 2 || /[\x00-\x1f\x7f]/.test(cleanEmail(email))) {
    throw new AppError("invalid_request", "email must be a valid e-mail address.", { param: "email" });
  }
}
