import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from "node:crypto";
import { AppError } from "@mkt/runtime/errors";

// scrypt cost: N=2^14, r=8, p=1 needs 16 MiB and tens of milliseconds per hash, which makes
// guessing expensive while staying under node's default 32 MiB maxmem. The parameters are stored
// with each hash, so they can be raised later without breaking existing passwords.
const N = 16384;
const R = 8;
const P = 1;
const SALT_BYTES = 16;
const KEY_BYTES = 32;

export const PASSWORD_MIN_CHARS = 8;
export const PASSWORD_MAX_CHARS = 256;

// Verification refuses stored parameters needing more memory than this (a corrupt row must not
// make one login allocate gigabytes).
const MAX_SCRYPT_MEMORY = 64 * 1024 * 1024;

/** The same password typed on different systems can arrive in different Unicode forms: NFC makes them one. */
function derive(password: string, salt: Buffer, keyLength: number, options: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(password.normalize("NFC"), salt, keyLength, options, (err, key) => (err ? reject(err) : resolve(key))),
  );
}

/** Refuses a password outside 8..256 characters (counted as code points, not UTF-16 units). */
export function validatePassword(password: string): void {
  const length = [...password].length;
  if (length < PASSWORD_MIN_CHARS || length > PASSWORD_MAX_CHARS) {
    throw new AppError(
      "invalid_request",
      `password must be ${PASSWORD_MIN_CHARS} to ${PASSWORD_MAX_CHARS} characters long.`,
      { param: "password" },
    );
  }
}

/** Hashes a password as `scrypt$N$r$p$<salt b64>$<hash b64>` with a fresh random salt. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(SALT_BYTES);
  const key = await derive(password, salt, KEY_BYTES, { N, r: R, p: P });
  return `scrypt$${N}$${R}$${P}$${salt.toString("base64")}$${key.toString("base64")}`;
}

const STORED_RE = /^scrypt\$(\d+)\$(\d+)\$(\d+)\$([A-Za-z0-9+/]+={0,2})\$([A-Za-z0-9+/]+={0,2})$/;

/**
 * Checks a password against a stored hash in constant time. A malformed stored value, one weaker
 * than what hashPassword writes (shorter salt or key) or one needing more than 64 MiB is a
 * mismatch rather than a crash or an unbounded computation.
 */
export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const match = STORED_RE.exec(stored);
  if (!match) return false;
  const [n, r, p] = [Number(match[1]), Number(match[2]), Number(match[3])];
  const salt = Buffer.from(match[4]!, "base64");
  const expected = Buffer.from(match[5]!, "base64");
  const powerOfTwo = n > 1 && (n & (n - 1)) === 0;
  const memory = 128 * n * r;
  if (
    !powerOfTwo ||
    r < 1 ||
    p < 1 ||
    p > 16 ||
    memory > MAX_SCRYPT_MEMORY ||
    expected.length < KEY_BYTES ||
    expected.length > 128 ||
    salt.length < SALT_BYTES
  ) {
    return false;
  }
  const key = await derive(password, salt, expected.length, { N: n, r, p, maxmem: MAX_SCRYPT_MEMORY + (1 << 20) });
  return timingSafeEqual(key, expected);
}
