import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashSecret } from "../src/secret-hash.ts";
import { rejection, startTestAccounts, uniqueEmail, uniqueIp, type TestAccounts } from "./accounts-harness.ts";

let t: TestAccounts;
let now = new Date("2026-11-23T10:00:00Z");
beforeAll(async () => {
  t = await startTestAccounts({ LOGIN_FAILURES_PER_IP_PER_HOUR: "3", SESSION_TTL_HOURS: "2" }, { clock: () => now });
});
afterAll(async () => {
  await t?.close();
});

describe("sessions", () => {
  it("logs a customer in, resolves the cookie token, and ends it on logout", async () => {
    const email = uniqueEmail();
    const { account } = await t.signUp(email, "customer password");
    const { sessionToken, session } = await t.client.login({
      email: email.toUpperCase(),
      password: "customer password",
      kind: "customer",
      clientIp: uniqueIp(),
    });
    expect(sessionToken).toMatch(/^mks_[A-Za-z0-9_-]{43}$/);
    expect(session).toMatchObject({ kind: "customer", subjectId: account!.accountId, email });
    expect(await t.query(`select token_hash from sessions where subject_id = $1`, [account!.accountId])).toEqual([
      { token_hash: hashSecret(sessionToken) },
    ]);

    expect((await t.client.resolveSession({ sessionToken })).session).toEqual(session);
    await t.client.logout({ sessionToken });
    await t.client.logout({ sessionToken }); // twice is fine
    expect(await rejection(t.client.resolveSession({ sessionToken }))).toMatchObject({ code: "unauthenticated" });
  });

  it("gives each login its own session and expires them after SESSION_TTL_HOURS", async () => {
    const email = uniqueEmail();
    await t.signUp(email, "customer password");
    const login = () =>
      t.client.login({ email, password: "customer password", kind: "customer", clientIp: uniqueIp() });
    const first = await login();
    const second = await login();
    expect(second.sessionToken).not.toBe(first.sessionToken);
    await t.client.logout({ sessionToken: first.sessionToken });
    await t.client.resolveSession({ sessionToken: second.sessionToken });

    now = new Date(now.getTime() + 2 * 3_600_000 + 1000);
    expect(await rejection(t.client.resolveSession({ sessionToken: second.sessionToken }))).toMatchObject({
      code: "unauthenticated",
    });
  });

  it("does not let a customer log in as a hoster", async () => {
    const email = uniqueEmail();
    await t.signUp(email, "customer password");
    const err = await rejection(
      t.client.login({ email, password: "customer password", kind: "hoster", clientIp: uniqueIp() }),
    );
    expect(err).toMatchObject({ code: "invalid_credentials" });
  });

  it("refuses wrong passwords and unknown addresses alike, then the IP after its budget", async () => {
    const email = uniqueEmail();
    await t.signUp(email, "customer password");
    const ip = uniqueIp();
    const attempt = (address: string, password: string) =>
      t.client.login({ email: address, password, kind: "customer", clientIp: ip });
    const wrong = await rejection(attempt(email, "not the password"));
    const unknown = await rejection(attempt(uniqueEmail(), "customer password"));
    expect(wrong).toMatchObject({ code: "invalid_credentials", message: "Wrong e-mail or password." });
    expect(unknown).toMatchObject({ code: "invalid_credentials", message: "Wrong e-mail or password." });
    await rejection(attempt(email, "still not it"));
    expect(await rejection(attempt(email, "customer password"))).toMatchObject({ code: "rate_limit_exceeded" });
  });

  it("refuses malformed tokens without a lookup and an unknown kind", async () => {
    expect(await rejection(t.client.resolveSession({ sessionToken: "" }))).toMatchObject({ code: "unauthenticated" });
    expect(
      await rejection(t.client.login({ email: uniqueEmail(), password: "x".repeat(10), kind: "admin", clientIp: "" })),
    ).toMatchObject({ code: "invalid_request", param: "kind" });
  });
});
