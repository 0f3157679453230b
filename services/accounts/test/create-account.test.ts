import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { verifyPassword } from "../src/passwords.ts";
import { rejection, startTestAccounts, uniqueEmail, uniqueIp, type TestAccounts } from "./accounts-harness.ts";

let t: TestAccounts;
beforeAll(async () => {
  t = await startTestAccounts();
});
afterAll(async () => {
  await t?.close();
});

describe("sign-up", () => {
  it("creates the account and a working first key, storing only hashes", async () => {
    const email = `  Ada.Lovelace+${Date.now()}@Example.COM `;
    const password = "analytical engine";
    const res = await t.client.createAccount({ email, password, clientIp: uniqueIp() });

    expect(res.account).toEqual({
      accountId: expect.stringMatching(/^[0-9a-f-]{36}$/),
      email: email.trim(),
      tier: "free",
      createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
    });
    expect(res.apiKey).toMatch(/^mk_[A-Za-z0-9_-]{43}$/);
    expect(res.key).toEqual({
      keyId: expect.stringMatching(/^[0-9a-f-]{36}$/),
      name: "default",
      prefix: res.apiKey.slice(0, 10),
      createdAt: res.account!.createdAt,
      revokedAt: "",
      scope: undefined,
      expiresAt: "",
      sessionKey: false,
    });

    const { principal } = await t.client.authenticate({ edgeId: "", apiKey: res.apiKey });
    expect(principal).toEqual({
      accountId: res.account!.accountId,
      email: email.trim(),
      keyId: res.key!.keyId,
      tier: "free",
      scope: undefined,
    });

    const accounts = await t.query<{ email_normalized: string; password_hash: string }>(
      `select * from accounts where id = $1`,
      [res.account!.accountId],
    );
    const keys = await t.query<{ key_hash: string; prefix: string }>(`select * from api_keys where account_id = $1`, [
      res.account!.accountId,
    ]);
    expect(accounts[0]!.email_normalized).toBe(email.trim().toLowerCase());
    expect(await verifyPassword(password, accounts[0]!.password_hash)).toBe(true);
    expect(keys).toHaveLength(1);
    expect(keys[0]!.key_hash).toBe(createHash("sha256").update(res.apiKey).digest("hex"));
    // Neither secret is anywhere in what was stored.
    const stored = JSON.stringify([accounts, keys]);
    expect(stored).not.toContain(res.apiKey);
    expect(stored).not.toContain(res.apiKey.slice(10));
    expect(stored).not.toContain(password);
  });

  it("treats e-mail addresses differing only in case as taken", async () => {
    const email = uniqueEmail();
    await t.client.createAccount({ email, password: "password one", clientIp: uniqueIp() });
    const err = await rejection(
      t.client.createAccount({ email: ` ${email.toUpperCase()} `, password: "password two", clientIp: uniqueIp() }),
    );
    expect(err).toBeInstanceOf(AppError);
    expect(err).toMatchObject({ code: "email_taken", message: "An account with this e-mail already exists." });
    expect((err as AppError).httpStatus).toBe(409);
  });

  it.each([
    ["empty", ""],
    ["no @", "ada.example.com"],
    ["no dot in the domain", "ada@localhost"],
    ["a space inside", "ada lovelace@example.com"],
    ["two @", "ada@lovelace@example.com"],
    ["too long", `${"a".repeat(60)}@${"b".repeat(200)}.com`],
  ])("refuses an e-mail that is %s", async (_, email) => {
    const err = await rejection(t.client.createAccount({ email, password: "long enough", clientIp: uniqueIp() }));
    expect(err).toMatchObject({ code: "invalid_request", param: "email" });
  });

  it.each([
    ["too short", "1234567"],
    ["too long", "x".repeat(257)],
  ])("refuses a password that is %s", async (_, password) => {
    const err = await rejection(t.client.createAccount({ email: uniqueEmail(), password, clientIp: uniqueIp() }));
    expect(err).toMatchObject({ code: "invalid_request", param: "password" });
  });

  it("lets exactly one of many concurrent sign-ups with one address succeed", async () => {
    const email = uniqueEmail();
    const variants = [email, email.toUpperCase(), ` ${email}`, email.replace(/^u/, "U")];
    const results = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) =>
        t.client.createAccount({
          email: variants[i % variants.length]!,
          password: "same address",
          clientIp: uniqueIp(),
        }),
      ),
    );
    const won = results.filter((r) => r.status === "fulfilled");
    const lost = results.filter((r) => r.status === "rejected");
    expect(won).toHaveLength(1);
    expect(lost.map((r) => (r.reason as AppError).code)).toEqual(Array(11).fill("email_taken"));

    const rows = await t.query(
      `select a.id, count(k.id)::int as keys from accounts a join api_keys k on k.account_id = a.id
       where a.email_normalized = $1 group by a.id`,
      [email],
    );
    expect(rows).toEqual([{ id: won[0]!.value.account!.accountId, keys: 1 }]);
  });
});
