import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { KeyRevoked } from "@mkt/proto/events/v1/events";
import { newKeySecret } from "../src/keys/key-secret.ts";
import { rejection, startTestAccounts, type TestAccounts } from "./accounts-harness.ts";

let t: TestAccounts;
beforeAll(async () => {
  t = await startTestAccounts();
});
afterAll(async () => {
  await t?.close();
});

describe("API keys", () => {
  it("creates, lists (oldest first, no secrets) and authenticates new keys", async () => {
    const { account, key: first, apiKey: firstSecret } = await t.signUp();
    const accountId = account!.accountId;
    const ci = await t.client.createApiKey({ accountId, name: "  ci runner " });
    const unnamed = await t.client.createApiKey({ accountId, name: "" });
    expect(ci.key).toMatchObject({ name: "ci runner", prefix: ci.apiKey.slice(0, 10), revokedAt: "" });
    expect(unnamed.key!.name).toBe("default");

    const { keys } = await t.client.listApiKeys({ accountId });
    expect(keys).toEqual([first, ci.key, unnamed.key]);
    const listed = JSON.stringify(keys);
    for (const secret of [firstSecret, ci.apiKey, unnamed.apiKey]) expect(listed).not.toContain(secret);

    const { principal } = await t.client.authenticate({ edgeId: "", apiKey: ci.apiKey });
    expect(principal).toMatchObject({ accountId, keyId: ci.key!.keyId, tier: "free" });
  });

  it("refuses a name over 100 characters or with control characters", async () => {
    const { account } = await t.signUp();
    for (const name of ["n".repeat(101), "line\nbreak"]) {
      await expect(t.client.createApiKey({ accountId: account!.accountId, name })).rejects.toMatchObject({
        code: "invalid_request",
        param: "name",
      });
    }
    await t.client.createApiKey({ accountId: account!.accountId, name: "n".repeat(100) });
  });

  it("refuses malformed account ids as bad requests and unknown ones as not found", async () => {
    for (const accountId of ["", "not-a-uuid", "1; drop table accounts"]) {
      await expect(t.client.createApiKey({ accountId, name: "x" })).rejects.toMatchObject({
        code: "invalid_request",
        param: "account_id",
      });
      await expect(t.client.listApiKeys({ accountId })).rejects.toMatchObject({
        code: "invalid_request",
        param: "account_id",
      });
    }
    const unknown = randomUUID();
    await expect(t.client.createApiKey({ accountId: unknown, name: "x" })).rejects.toMatchObject({ code: "not_found" });
    await expect(t.client.listApiKeys({ accountId: unknown })).rejects.toMatchObject({ code: "not_found" });
  });

  it("caps an account at 100 active keys, even under concurrent creation", async () => {
    const { account } = await t.signUp();
    const accountId = account!.accountId;
    const results = await Promise.allSettled(
      Array.from({ length: 110 }, (_, i) => t.client.createApiKey({ accountId, name: `k${i}` })),
    );
    const created = results.filter((r) => r.status === "fulfilled");
    const refused = results.filter((r) => r.status === "rejected");
    expect(created).toHaveLength(99); // plus the sign-up key
    expect(refused.map((r) => (r.reason as AppError).code)).toEqual(Array(11).fill("invalid_request"));

    await t.client.revokeApiKey({ accountId, keyId: created[0]!.value.key!.keyId });
    await t.client.createApiKey({ accountId, name: "after a revocation" });
    expect((await t.client.listApiKeys({ accountId })).keys).toHaveLength(101);
  });

  it("resolves a subscription's scoped key to a principal with its scope", async () => {
    const { account } = await t.signUp();
    const scoped = newKeySecret();
    const keyId = randomUUID();
    await t.query(
      `insert into api_keys (id, account_id, name, prefix, key_hash, subscription_id, product_id, hoster_id)
       values ($1, $2, 'sub', $3, $4, 'sub_1', 'prod_1', 'hst_1')`,
      [keyId, account!.accountId, scoped.prefix, scoped.hash],
    );
    const scope = { subscriptionId: "sub_1", productId: "prod_1", hosterId: "hst_1" };
    const { principal } = await t.client.authenticate({ edgeId: "", apiKey: scoped.secret });
    expect(principal).toMatchObject({ accountId: account!.accountId, keyId, scope });
    const { keys } = await t.client.listApiKeys({ accountId: account!.accountId });
    expect(keys.find((k) => k.keyId === keyId)?.scope).toEqual(scope);
  });
});

describe("authentication", () => {
  it.each([
    ["empty", ""],
    ["another vendor's key", `sk-${"a".repeat(48)}`],
    ["too short", "mk_abc"],
    ["too long", `mk_${"a".repeat(101)}`],
    ["with a bearer prefix", `Bearer mk_${"a".repeat(43)}`],
    ["with quotes", `mk_${"a".repeat(30)}' or '1'='1`],
    ["well-formed but never issued", `mk_${"a".repeat(43)}`],
  ])("refuses a key that is %s", async (_, apiKey) => {
    const err = await rejection(t.client.authenticate({ edgeId: "", apiKey }));
    expect(err).toBeInstanceOf(AppError);
    expect(err).toMatchObject({ code: "invalid_api_key", message: "Invalid API key." });
    expect((err as AppError).httpStatus).toBe(401);
  });
});

describe("revocation", () => {
  it("stops the key working, keeps the others, and answers a repeat unchanged", async () => {
    const { account, apiKey: kept } = await t.signUp();
    const accountId = account!.accountId;
    const doomed = await t.client.createApiKey({ accountId, name: "doomed" });

    const { key } = await t.client.revokeApiKey({ accountId, keyId: doomed.key!.keyId });
    expect(key).toEqual({ ...doomed.key, revokedAt: expect.stringMatching(/^\d{4}-.*Z$/) });
    await expect(t.client.authenticate({ edgeId: "", apiKey: doomed.apiKey })).rejects.toMatchObject({
      code: "invalid_api_key",
    });
    await t.client.authenticate({ edgeId: "", apiKey: kept });

    const again = await t.client.revokeApiKey({ accountId, keyId: doomed.key!.keyId });
    expect(again.key).toEqual(key);
    const { keys } = await t.client.listApiKeys({ accountId });
    expect(keys.find((k) => k.keyId === key!.keyId)).toEqual(key);
  });

  it("announces keys.revoked on NATS before answering", async () => {
    const { account } = await t.signUp();
    const accountId = account!.accountId;
    const extra = await t.client.createApiKey({ accountId, name: "announced" });
    const received: KeyRevoked[] = [];
    const sub = t.nc.subscribe(t.names.keysRevoked, {
      callback: (_err, msg) => {
        received.push(KeyRevoked.decode(msg.data));
      },
    });
    await t.nc.flush(); // the subscription is registered at the server

    await t.client.revokeApiKey({ accountId, keyId: extra.key!.keyId });
    // accounts flushed its publish before answering, so the server had already routed the message
    // to this connection; one round trip on it (messages arrive in order) is all the wait needed.
    await t.nc.flush();
    expect(received).toEqual([{ keyId: extra.key!.keyId, accountId }]);
    sub.unsubscribe();
  });

  it("answers not_found for another account's, unknown or malformed key ids, revoking nothing", async () => {
    const owner = await t.signUp();
    const other = await t.signUp();
    const keyId = owner.key!.keyId;
    for (const req of [
      { accountId: other.account!.accountId, keyId },
      { accountId: owner.account!.accountId, keyId: randomUUID() },
      { accountId: owner.account!.accountId, keyId: "key_123" },
      { accountId: "not-a-uuid", keyId },
      { accountId: "", keyId: "" },
    ]) {
      const err = await rejection(t.client.revokeApiKey(req));
      expect(err).toMatchObject({ code: "not_found", message: "No such API key." });
    }
    await t.client.authenticate({ edgeId: "", apiKey: owner.apiKey });
  });
});
