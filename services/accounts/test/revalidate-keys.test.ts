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

describe("RevalidateKeys", () => {
  it("answers the current principal of each live key and leaves out revoked, expired and unknown ones", async () => {
    const { account, key: live } = await t.signUp();
    const accountId = account!.accountId;
    const revoked = await t.client.createApiKey({ accountId, name: "revoked" });
    const expired = await t.client.createApiKey({ accountId, name: "expired" });
    await t.client.revokeApiKey({ accountId, keyId: revoked.key!.keyId });
    await t.query(`update api_keys set expires_at = now() - interval '1 second' where id = $1`, [expired.key!.keyId]);

    const { principals } = await t.client.revalidateKeys({
      edgeId: "",
      keyIds: [
        live!.keyId,
        live!.keyId.toUpperCase(),
        revoked.key!.keyId,
        expired.key!.keyId,
        randomUUID(),
        "not-a-uuid",
        "'); drop table api_keys; --",
      ],
    });
    expect(principals).toEqual([
      { accountId, email: account!.email, keyId: live!.keyId, tier: "free", scope: undefined },
    ]);
  });

  it("answers many keys in one call, and refuses more than 10000 ids", async () => {
    const signUps = await Promise.all(Array.from({ length: 20 }, () => t.signUp()));
    const keyIds = signUps.map((s) => s.key!.keyId);
    const { principals } = await t.client.revalidateKeys({ edgeId: "", keyIds });
    expect(principals.map((p) => p.keyId).sort()).toEqual([...keyIds].sort());

    // An empty call still says how long the edge may trust what it caches.
    expect(await t.client.revalidateKeys({ edgeId: "", keyIds: [] })).toEqual({
      principals: [],
      principalTtlMs: 2000n,
    });
    await expect(
      t.client.revalidateKeys({ edgeId: "", keyIds: Array.from({ length: 10_001 }, () => randomUUID()) }),
    ).rejects.toMatchObject({ code: "invalid_request", param: "key_ids" });
  });
});
