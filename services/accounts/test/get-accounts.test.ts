import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestAccounts, type TestAccounts } from "./accounts-harness.ts";

let t: TestAccounts;
beforeAll(async () => {
  t = await startTestAccounts();
});
afterAll(async () => {
  await t?.close();
});

describe("GetAccounts", () => {
  it("answers the known accounts of a batch once each, leaving out unknown and malformed ids", async () => {
    const a = (await t.signUp()).account!;
    const b = (await t.signUp()).account!;
    const { accounts } = await t.client.getAccounts({
      accountIds: [b.accountId, a.accountId, b.accountId.toUpperCase(), randomUUID(), "not-a-uuid"],
    });
    expect([...accounts].sort((x, y) => x.email.localeCompare(y.email))).toEqual(
      [a, b].sort((x, y) => x.email.localeCompare(y.email)),
    );
    expect((await t.client.getAccounts({ accountIds: [] })).accounts).toEqual([]);
  });

  it("refuses more than 1000 ids in one call", async () => {
    const err = await t.client.getAccounts({ accountIds: Array.from({ length: 1001 }, () => randomUUID()) }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: "invalid_request", param: "account_ids" });
  });
});
