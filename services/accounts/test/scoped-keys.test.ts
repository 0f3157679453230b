import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newApiKey } from "@mkt/runtime/api-key-format";
import { KeyRevoked } from "@mkt/proto/events/v1/events";
import { rejection, startTestAccounts, type TestAccounts } from "./accounts-harness.ts";

let t: TestAccounts;
beforeAll(async () => {
  t = await startTestAccounts();
});
afterAll(async () => {
  await t?.close();
});

async function customer() {
  const { account, apiKey } = await t.signUp();
  return { accountId: account!.accountId, apiKey };
}

const newScope = () => ({ subscriptionId: randomUUID(), productId: randomUUID(), hosterId: randomUUID() });

describe("scoped keys", () => {
  it("stores a subscription's key once: a retry with the same secret gets the same key", async () => {
    const { accountId } = await customer();
    const scope = newScope();
    const apiKey = newApiKey();
    const first = await t.client.issueScopedKey({ accountId, scope, apiKey, name: "Pro plan" });
    const again = await t.client.issueScopedKey({ accountId, scope, apiKey, name: "Pro plan" });
    expect(again.key).toEqual(first.key);
    expect(first.key).toMatchObject({ name: "Pro plan", prefix: apiKey.slice(0, 10), revokedAt: "", scope });

    const { principal } = await t.client.authenticate({ edgeId: "", apiKey });
    expect(principal).toMatchObject({ accountId, keyId: first.key!.keyId, scope });
    // Only the hash is stored.
    const rows = await t.query(`select * from api_keys where subscription_id = $1`, [scope.subscriptionId]);
    expect(rows).toHaveLength(1);
    expect(JSON.stringify(rows)).not.toContain(apiKey);

    // Another secret for the same subscription is a caller bug, not a second key.
    const err = await rejection(t.client.issueScopedKey({ accountId, scope, apiKey: newApiKey(), name: "" }));
    expect(err).toMatchObject({ code: "idempotency_conflict" });
  });

  it("lists scoped keys with their scope, and RevokeApiKey refuses them", async () => {
    const { accountId } = await customer();
    const scope = newScope();
    const { key } = await t.client.issueScopedKey({ accountId, scope, apiKey: newApiKey(), name: "" });
    expect(key!.name).toBe("subscription");
    const { keys } = await t.client.listApiKeys({ accountId });
    expect(keys.find((k) => k.keyId === key!.keyId)?.scope).toEqual(scope);

    const err = await rejection(t.client.revokeApiKey({ accountId, keyId: key!.keyId }));
    expect(err).toMatchObject({ code: "invalid_request", param: "key_id" });
    expect((err as Error).message).toContain(scope.subscriptionId);
  });

  it("revokes through the announced path: committed, published on keys.revoked, then answered", async () => {
    const { accountId } = await customer();
    const scope = newScope();
    const apiKey = newApiKey();
    const { key } = await t.client.issueScopedKey({ accountId, scope, apiKey, name: "" });
    const sub = t.nc.subscribe(t.names.keysRevoked, { max: 1 });

    const revoked = await t.client.revokeScopedKey({ accountId, subscriptionId: scope.subscriptionId, apiKey: "" });
    expect(revoked.key).toMatchObject({ keyId: key!.keyId, scope });
    expect(revoked.key!.revokedAt).not.toBe("");
    for await (const msg of sub) expect(KeyRevoked.decode(msg.data)).toEqual({ keyId: key!.keyId, accountId });
    await expect(t.client.authenticate({ edgeId: "", apiKey })).rejects.toMatchObject({ code: "invalid_api_key" });

    // Idempotent: the first revocation time stays.
    const again = await t.client.revokeScopedKey({ accountId, subscriptionId: scope.subscriptionId, apiKey: "" });
    expect(again.key!.revokedAt).toBe(revoked.key!.revokedAt);
  });

  it("a revocation that arrives first stores the key revoked, so a late issue cannot revive it", async () => {
    const { accountId } = await customer();
    const scope = newScope();
    const apiKey = newApiKey();
    const revoked = await t.client.revokeScopedKey({ accountId, subscriptionId: scope.subscriptionId, apiKey });
    expect(revoked.key!.revokedAt).not.toBe("");

    const late = await t.client.issueScopedKey({ accountId, scope, apiKey, name: "" });
    expect(late.key!.keyId).toBe(revoked.key!.keyId);
    expect(late.key!.revokedAt).not.toBe("");
    await expect(t.client.authenticate({ edgeId: "", apiKey })).rejects.toMatchObject({ code: "invalid_api_key" });

    // Nothing to revoke and no secret given: an empty answer, not an error.
    expect(await t.client.revokeScopedKey({ accountId, subscriptionId: randomUUID(), apiKey: "" })).toEqual({});
  });

  it("refuses malformed ids and keys, and unknown accounts", async () => {
    const { accountId } = await customer();
    const scope = newScope();
    const cases: Array<[Parameters<typeof t.client.issueScopedKey>[0], string]> = [
      [{ accountId: "x", scope, apiKey: newApiKey(), name: "" }, "account_id"],
      [
        { accountId, scope: { ...scope, subscriptionId: "sub_1" }, apiKey: newApiKey(), name: "" },
        "scope.subscription_id",
      ],
      [{ accountId, scope: { ...scope, hosterId: "" }, apiKey: newApiKey(), name: "" }, "scope.hoster_id"],
      [{ accountId, scope, apiKey: "mk_short", name: "" }, "api_key"],
    ];
    for (const [req, param] of cases) {
      await expect(t.client.issueScopedKey(req)).rejects.toMatchObject({ code: "invalid_request", param });
    }
    await expect(
      t.client.issueScopedKey({ accountId: randomUUID(), scope, apiKey: newApiKey(), name: "" }),
    ).rejects.toMatchObject({ code: "not_found" });
  });
});
