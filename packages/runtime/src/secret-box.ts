import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";

/**
 * `SECRETS_KEY` is exactly what `npm start` generates and docs/deploy.md tells operators to make:
 * 32 random bytes written as 64 hex characters (`openssl rand -hex 32`). One format only, so a key
 * pasted in another encoding fails at start instead of silently meaning different bytes.
 */
const KEY_FORMAT = /^[0-9a-f]{64}$/i;

const FORMAT_VERSION = "v1";
const IV_BYTES = 12;
const TAG_BYTES = 16;

/**
 * Parses `SECRETS_KEY`. Throws an Error saying what the format is, never echoing the value (the
 * config loader prefixes the variable's name).
 */
export function parseSecretsKey(text: string): Buffer {
  if (!KEY_FORMAT.test(text.trim())) {
    throw new Error("must be 32 bytes written as 64 hex characters (generate one with `openssl rand -hex 32`)");
  }
  return Buffer.from(text.trim(), "hex");
}

/** A short, non-secret fingerprint of a key: sealed values name the key they need. */
function keyId(key: Buffer): string {
  return createHash("sha256").update("mkt-secret-box-key-id").update(key).digest("base64url").slice(0, 8);
}

/** A sealed value could not be opened: unknown format or key, or it was altered. */
export class SecretBoxError extends Error {
  override name = "SecretBoxError";
}

/**
 * AES-256-GCM for secrets a service must store and use again (a hoster's bearer token). Sealed
 * values read `v1.<key id>.<iv>.<ciphertext>.<tag>` (base64url parts): the version and key id let
 * a later key rotation open old values with the previous key while sealing with the new one.
 * Every value gets a fresh random 12-byte IV. `context` is bound as additional authenticated data
 * (for example `hoster:<id>:api_key`), so a ciphertext copied onto another row does not open.
 */
export class SecretBox {
  readonly #sealKey: Buffer;
  readonly #sealKeyId: string;
  readonly #keys: Map<string, Buffer>;

  /** Seals with `current`; opens values sealed with `current` or any of `previous`. */
  constructor(current: Buffer, previous: readonly Buffer[] = []) {
    for (const key of [current, ...previous]) {
      if (key.length !== 32) throw new Error("SecretBox keys are 32 bytes");
    }
    this.#sealKey = current;
    this.#sealKeyId = keyId(current);
    this.#keys = new Map([current, ...previous].map((key) => [keyId(key), key]));
  }

  /** Encrypts `plaintext` for storage. */
  seal(plaintext: string, context: string): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv("aes-256-gcm", this.#sealKey, iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(Buffer.from(context, "utf8"));
    const ciphertext = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
    return [FORMAT_VERSION, this.#sealKeyId, iv, ciphertext, cipher.getAuthTag()]
      .map((part) => (typeof part === "string" ? part : part.toString("base64url")))
      .join(".");
  }

  /** Decrypts a value from `seal` with the same `context`; throws SecretBoxError otherwise. */
  open(sealed: string, context: string): string {
    const parts = sealed.split(".");
    if (parts.length !== 5 || parts[0] !== FORMAT_VERSION) throw new SecretBoxError("unknown sealed value format");
    const [, id, ivText, ciphertextText, tagText] = parts as [string, string, string, string, string];
    const key = this.#keys.get(id);
    if (!key) throw new SecretBoxError("sealed with a key this process does not have");
    const iv = Buffer.from(ivText, "base64url");
    const tag = Buffer.from(tagText, "base64url");
    if (iv.length !== IV_BYTES || tag.length !== TAG_BYTES) throw new SecretBoxError("malformed sealed value");
    try {
      const decipher = createDecipheriv("aes-256-gcm", key, iv, { authTagLength: TAG_BYTES });
      decipher.setAAD(Buffer.from(context, "utf8"));
      decipher.setAuthTag(tag);
      return Buffer.concat([decipher.update(Buffer.from(ciphertextText, "base64url")), decipher.final()]).toString(
        "utf8",
      );
    } catch {
      throw new SecretBoxError("sealed value failed authentication");
    }
  }
}
