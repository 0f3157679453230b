import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Msg } from "@nats-io/transport-node";
import { KeyRevoked, KeyRevokedAck } from "@mkt/proto/events/v1/events";
import { startTestAccounts, type TestAccounts } from "./accounts-harness.ts";

// A revocation answers once every edge that authenticated or revalidated the key within its TTL
// has acked keys.revoked, or once one TTL (+ margin) has passed
// (docs/adr/0018-revocation-waits-for-the-edges.md). The edges here are NATS subscribers of the
// test's own that ack as an edge does, or stay silent like an edge cut off from NATS.

const TTL = 1_000;
const FENCE_WAIT = TTL + TTL / 10;

let t: TestAccounts;
beforeAll(async () => {
  t = await startTestAccounts({ PRINCIPAL_TTL_MS: String(TTL) });
});
afterAll(async () => {
  await t?.close();
});

/** An edge listening on keys.revoked: acks with its id, or (`silent`) only records what it heard. */
function edge(edgeId: string, silent = false) {
  const heard: string[] = [];
  const subscription = t.nc.subscribe(t.names.keysRevoked, {
    callback: (_err, msg: Msg) => {
      heard.push(KeyRevoked.decode(msg.data).keyId);
      if (!silent && msg.reply) msg.respond(KeyRevokedAck.encode({ edgeId }).finish());
    },
  });
  return { heard, stop: () => subscription.unsubscribe() };
}

/** A fresh account key, authenticated by `authenticatedBy` and revalidated by `revalidatedBy`. */
async function keyHeldBy(authenticatedBy: string[], revalidatedBy: string[]) {
  const { account, key, apiKey } = await t.signUp();
  for (const edgeId of authenticatedBy) await t.client.authenticate({ edgeId, apiKey });
  for (const edgeId of revalidatedBy) await t.client.revalidateKeys({ edgeId, keyIds: [key!.keyId] });
  return { accountId: account!.accountId, keyId: key!.keyId };
}

async function timedRevoke(accountId: string, keyId: string): Promise<number> {
  const startedAt = performance.now();
  const { key } = await t.client.revokeApiKey({ accountId, keyId });
  expect(key?.revokedAt).not.toBe("");
  return performance.now() - startedAt;
}

describe("revoking a key waits for the edges that hold it", () => {
  it("answers as soon as every holding edge has acked", async () => {
    const { accountId, keyId } = await keyHeldBy(["edge_a"], ["edge_b"]);
    const a = edge("edge_a");
    const b = edge("edge_b");
    await t.nc.flush();
    try {
      expect(await timedRevoke(accountId, keyId)).toBeLessThan(TTL / 2);
      expect(a.heard).toContain(keyId);
      expect(b.heard).toContain(keyId);
    } finally {
      a.stop();
      b.stop();
    }
  });

  it("waits one TTL plus the margin for a holding edge that does not ack, then answers", async () => {
    const { accountId, keyId } = await keyHeldBy(["edge_c"], ["edge_d"]);
    const c = edge("edge_c");
    const d = edge("edge_d", true);
    await t.nc.flush();
    try {
      const took = await timedRevoke(accountId, keyId);
      expect(took).toBeGreaterThanOrEqual(FENCE_WAIT - 50);
      expect(took).toBeLessThan(FENCE_WAIT + 2_000);
      expect(d.heard).toContain(keyId);
    } finally {
      c.stop();
      d.stop();
    }
  });

  it("waits for nobody when no edge checked the key within its time, or none ever did", async () => {
    const silent = edge("edge_e", true);
    await t.nc.flush();
    try {
      const unheld = await keyHeldBy([], []);
      expect(await timedRevoke(unheld.accountId, unheld.keyId)).toBeLessThan(TTL / 2);
      // A holder row past its time (the edge stopped using the key two TTLs ago) is not waited for.
      const stale = await keyHeldBy(["edge_e"], []);
      await t.query(`update key_holders set holds_until = now() - interval '1 second' where key_id = $1`, [
        stale.keyId,
      ]);
      expect(await timedRevoke(stale.accountId, stale.keyId)).toBeLessThan(TTL / 2);
    } finally {
      silent.stop();
    }
  });

  it("records a holder only for a live key, and refuses a malformed edge id", async () => {
    const { accountId, keyId } = await keyHeldBy(["edge_f"], ["edge_f", "edge_g"]);
    const rows = await t.query<{ edge_id: string }>(
      `select edge_id from key_holders where key_id = $1 and holds_until > now() + interval '1 second' order by edge_id`,
      [keyId],
    );
    expect(rows.map((r) => r.edge_id)).toEqual(["edge_f", "edge_g"]);
    await t.client.revokeApiKey({ accountId, keyId });
    await t.client.revalidateKeys({ edgeId: "edge_h", keyIds: [keyId] });
    expect(await t.query(`select 1 from key_holders where key_id = $1 and edge_id = 'edge_h'`, [keyId])).toEqual([]);
    await expect(t.client.revalidateKeys({ edgeId: "edge h; drop", keyIds: [keyId] })).rejects.toMatchObject({
      code: "invalid_request",
    });
  });
});
