import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { hashKey, looksLikeKey, newKeySecret } from "../src/keys/key-secret.ts";

describe("API key secrets", () => {
  it("are mk_ + 32 random bytes in base64url, with a 10-character prefix and a SHA-256 hash", () => {
    const a = newKeySecret();
    const b = newKeySecret();
    expect(a.secret).toMatch(/^mk_[A-Za-z0-9_-]{43}$/);
    expect(a.prefix).toBe(a.secret.slice(0, 10));
    expect(a.hash).toBe(createHash("sha256").update(a.secret).digest("hex"));
    expect(hashKey(a.secret)).toBe(a.hash);
    expect(a.secret).not.toBe(b.secret);
    expect(looksLikeKey(a.secret)).toBe(true);
  });

  it("recognise only plausible keys", () => {
    for (const bad of [
      "",
      "mk_",
      "mk_short",
      "sk-" + "a".repeat(40),
      "mk_" + "a".repeat(101),
      "mk_" + "a b".repeat(10),
    ]) {
      expect(looksLikeKey(bad)).toBe(false);
    }
    expect(looksLikeKey("mk_" + "a".repeat(20))).toBe(true);
  });
});
