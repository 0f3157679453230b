import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashSecret } from "../src/secret-hash.ts";
import { rejection, startTestAccounts, uniqueEmail, uniqueIp, type TestAccounts } from "./accounts-harness.ts";

let t: TestAccounts;
beforeAll(async () => {
  t = await startTestAccounts({ INVITE_FAILURES_PER_IP_PER_HOUR: "3" });
});
afterAll(async () => {
  await t?.close();
});

const register = (inviteCode: string, email = uniqueEmail(), password = "hoster password") =>
  t.client.registerHosterLogin({ hosterId: randomUUID(), inviteCode, email, password, clientIp: uniqueIp() });

describe("hoster invites", () => {
  it("creates codes of at least 128 random bits and stores only their hash", async () => {
    const { inviteCode } = await t.client.createInvite({});
    expect(inviteCode).toMatch(/^inv_[A-Za-z0-9_-]{32}$/); // 24 bytes = 192 bits
    const rows = await t.query(`select code_hash from invites`);
    expect(JSON.stringify(rows)).not.toContain(inviteCode);
    expect(rows).toContainEqual({ code_hash: hashSecret(inviteCode) });
  });

  it("lets exactly one of fifty concurrent registrations spend a code", async () => {
    const { inviteCode } = await t.client.createInvite({});
    const results = await Promise.allSettled(Array.from({ length: 50 }, () => register(inviteCode)));
    const won = results.filter((r) => r.status === "fulfilled");
    expect(won).toHaveLength(1);
    for (const lost of results.filter((r) => r.status === "rejected")) {
      expect(lost.reason).toMatchObject({ code: "invalid_request", param: "invite_code" });
    }
    const [invite] = await t.query(`select hoster_id from invites where code_hash = $1`, [hashSecret(inviteCode)]);
    expect(invite).toEqual({ hoster_id: (won[0] as PromiseFulfilledResult<{ hosterId: string }>).value.hosterId });
  });

  it("keeps the code when the login cannot be created (e-mail taken)", async () => {
    const email = uniqueEmail();
    await register((await t.client.createInvite({})).inviteCode, email);
    const { inviteCode } = await t.client.createInvite({});
    expect(await rejection(register(inviteCode, email.toUpperCase()))).toMatchObject({ code: "email_taken" });
    await t.client.checkInvite({ inviteCode, clientIp: uniqueIp() }); // still usable
    await register(inviteCode);
  });

  it("generates a portal password, shown once, when none is given", async () => {
    const { inviteCode } = await t.client.createInvite({});
    const email = uniqueEmail();
    const created = await register(inviteCode, email, "");
    expect(created.portalPassword).toMatch(/^[A-Za-z0-9_-]{24}$/);
    const session = await t.client.login({
      email,
      password: created.portalPassword,
      kind: "hoster",
      clientIp: uniqueIp(),
    });
    expect(session.session).toMatchObject({ kind: "hoster", subjectId: created.hosterId, email });
  });

  it("counts wrong codes per IP and refuses the address once its hour's budget is spent", async () => {
    const ip = uniqueIp();
    const check = (inviteCode: string) => t.client.checkInvite({ inviteCode, clientIp: ip });
    for (const wrong of ["nope", "inv_" + "x".repeat(32), "inv_" + "y".repeat(32)]) {
      expect(await rejection(check(wrong))).toMatchObject({ code: "invalid_request", param: "invite_code" });
    }
    const { inviteCode } = await t.client.createInvite({});
    // Even the right code is refused now: guessing by volume gets nowhere.
    expect(await rejection(check(inviteCode))).toMatchObject({
      code: "rate_limit_exceeded",
      headers: { "retry-after": expect.stringMatching(/^\d+$/) },
    });
    await t.client.checkInvite({ inviteCode, clientIp: uniqueIp() });
  });
});
