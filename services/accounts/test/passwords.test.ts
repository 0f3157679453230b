import { describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { hashPassword, validatePassword, verifyPassword } from "../src/passwords.ts";

describe("password hashing", () => {
  it("stores scrypt with its parameters and a fresh salt", async () => {
    const a = await hashPassword("correct horse battery");
    const b = await hashPassword("correct horse battery");
    expect(a).toMatch(/^scrypt\$16384\$8\$1\$[A-Za-z0-9+/]{22}==\$[A-Za-z0-9+/]{43}=$/);
    expect(a).not.toBe(b);
    expect(a).not.toContain("correct horse");
  });

  it("verifies the right password and only it", async () => {
    const stored = await hashPassword("correct horse battery");
    expect(await verifyPassword("correct horse battery", stored)).toBe(true);
    expect(await verifyPassword("correct horse batterY", stored)).toBe(false);
    expect(await verifyPassword("", stored)).toBe(false);
  });

  it("treats composed and decomposed Unicode as the same password", async () => {
    const stored = await hashPassword("caf\u00e9-pa\u00dfwort");
    expect(await verifyPassword("cafe\u0301-pa\u00dfwort", stored)).toBe(true);
  });

  it("answers false for malformed or unreasonable stored hashes instead of throwing", async () => {
    const stored = await hashPassword("correct horse battery");
    const [, , , , salt, hash] = stored.split("$");
    for (const bad of [
      "",
      "plain",
      "bcrypt$10$abc",
      `${stored}$extra`,
      stored.slice(0, -8), // truncated hash
      `scrypt$1000$8$1$${salt}$${hash}`, // N not a power of two
      `scrypt$1048576$8$1$${salt}$${hash}`, // 1 GiB of memory
      `scrypt$16384$8$1$${salt}$AAAA`, // key too short
    ]) {
      expect(await verifyPassword("correct horse battery", bad)).toBe(false);
    }
  });

  it("accepts stored hashes with other (reasonable) parameters", async () => {
    // The same derivation at N=1024: parameters are read from the stored value.
    const { scryptSync } = await import("node:crypto");
    const salt = Buffer.from("0123456789abcdef");
    const key = scryptSync("correct horse battery", salt, 32, { N: 1024, r: 8, p: 1 });
    const stored = `scrypt$1024$8$1$${salt.toString("base64")}$${key.toString("base64")}`;
    expect(await verifyPassword("correct horse battery", stored)).toBe(true);
  });
});

describe("password rules", () => {
  const refused = (password: string) => {
    try {
      validatePassword(password);
    } catch (err) {
      return err;
    }
    return undefined;
  };

  it("takes 8 to 256 characters", () => {
    expect(refused("12345678")).toBeUndefined();
    expect(refused("x".repeat(256))).toBeUndefined();
    for (const bad of ["", "1234567", "x".repeat(257)]) {
      const err = refused(bad);
      expect(err).toBeInstanceOf(AppError);
      expect(err).toMatchObject({ code: "invalid_request", param: "password" });
    }
  });

  it("counts characters, not UTF-16 units", () => {
    expect(refused("\u{1F600}".repeat(4))).toBeInstanceOf(AppError); // 8 units, 4 characters
    expect(refused("\u{1F600}".repeat(256))).toBeUndefined(); // 512 units, 256 characters
  });
});
