import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { loadConfig, secretsKey } from "../src/config.ts";
import { parseSecretsKey, SecretBox, SecretBoxError } from "../src/secret-box.ts";

const key = () => randomBytes(32);
const TOKEN = "hoster-token-SECRET-1234";

describe("SecretBox", () => {
  it("round-trips, with a fresh IV for every value and the plaintext nowhere in the output", () => {
    const box = new SecretBox(key());
    const a = box.seal(TOKEN, "hoster:1:api_key");
    const b = box.seal(TOKEN, "hoster:1:api_key");
    expect(a).not.toBe(b);
    expect(a).not.toContain(TOKEN);
    expect(a).toMatch(/^v1\.[\w-]{8}\.[\w-]{16}\.[\w-]+\.[\w-]{22}$/);
    expect(box.open(a, "hoster:1:api_key")).toBe(TOKEN);
    expect(box.open(b, "hoster:1:api_key")).toBe(TOKEN);
  });

  it("detects a changed ciphertext, tag or IV", () => {
    const box = new SecretBox(key());
    const sealed = box.seal(TOKEN, "ctx");
    const parts = sealed.split(".");
    for (const index of [2, 3, 4]) {
      const bytes = Buffer.from(parts[index]!, "base64url");
      bytes[0] = bytes[0]! ^ 1;
      const tampered = [...parts];
      tampered[index] = bytes.toString("base64url");
      expect(() => box.open(tampered.join("."), "ctx")).toThrow(SecretBoxError);
    }
    expect(() => box.open("v2" + sealed.slice(2), "ctx")).toThrow(SecretBoxError);
    expect(() => box.open("not sealed", "ctx")).toThrow(SecretBoxError);
  });

  it("refuses a value moved to another context (another row)", () => {
    const box = new SecretBox(key());
    expect(() => box.open(box.seal(TOKEN, "hoster:1:api_key"), "hoster:2:api_key")).toThrow(SecretBoxError);
  });

  it("refuses the wrong key, and opens old values with a previous key after rotation", () => {
    const oldKey = key();
    const sealed = new SecretBox(oldKey).seal(TOKEN, "ctx");
    expect(() => new SecretBox(key()).open(sealed, "ctx")).toThrow(SecretBoxError);
    const rotated = new SecretBox(key(), [oldKey]);
    expect(rotated.open(sealed, "ctx")).toBe(TOKEN);
    expect(rotated.seal(TOKEN, "ctx").split(".")[1]).not.toBe(sealed.split(".")[1]);
  });
});

describe("SECRETS_KEY", () => {
  it("is 64 hex characters, as npm start and docs/deploy.md generate it", () => {
    const hex = randomBytes(32).toString("hex");
    expect(parseSecretsKey(hex)).toEqual(Buffer.from(hex, "hex"));
    expect(loadConfig({ SECRETS_KEY: secretsKey() }, { SECRETS_KEY: hex.toUpperCase() }).SECRETS_KEY).toBe(
      hex.toUpperCase(),
    );
  });

  it.each([
    ["empty", ""],
    ["too short", randomBytes(16).toString("hex")],
    ["base64", randomBytes(32).toString("base64")],
    ["not hex", "z".repeat(64)],
  ])("fails at start naming the variable, never echoing it, when %s", (_case, value) => {
    const load = () => loadConfig({ SECRETS_KEY: secretsKey() }, { SECRETS_KEY: value });
    expect(load).toThrow(/SECRETS_KEY: must be 32 bytes written as 64 hex characters/);
    if (value) expect(load).not.toThrow(value);
  });
});
