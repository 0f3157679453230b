import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { LeaseResource, type LeaseNeed } from "@mkt/proto/billing/v1/leases";
import { startTestBilling, type TestBilling } from "./billing-harness.ts";

// GrantLease sizing a spend-limited key's room (docs/adr/0020-key-spend-limits-in-billing.md), and
// SetKeyLimit's checks.
const BASE = Date.UTC(2030, 0, 7, 12, 0, 10);
let t: TestBilling;

beforeAll(async () => {
  t = await startTestBilling({ LEASE_TTL_MS: "2000", STARTING_CREDIT_USD: "5" }, { clock: () => new Date(BASE) });
});
afterAll(async () => {
  await t?.close();
});

const need = (credit: bigint, keyId: string): LeaseNeed => ({
  creditMicros: credit,
  requests: 1n,
  tokens: 0n,
  subscriptionId: "",
  keyId,
});
const grant = (accountId: string, keyId: string, credit: bigint, minCreditMicros = 0n) =>
  t.client.grantLease({
    edgeId: `edge_${randomUUID()}`,
    incarnation: 0n,
    bootId: "",
    sequence: 1n,
    accountId,
    tier: "free",
    request: need(credit, keyId),
    minCreditMicros,
  });

async function refusal(p: Promise<unknown>): Promise<string> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  return err === undefined ? "" : AppError.fromGrpc(err).code;
}

describe("a spend-limited key in GrantLease", () => {
  it("lists the key in the lease, grants key room beside the credit, and refuses what the limit cannot cover", async () => {
    const accountId = randomUUID();
    const keyId = randomUUID();
    await t.client.setKeyLimit({ accountId, keyId, limitMicros: 3_000n, limitReset: "weekly" });

    const { lease } = await grant(accountId, keyId, 1_000n);
    const [budget] = lease!.keyBudgets;
    expect(budget).toMatchObject({ keyId, limitMicros: 3_000n, limitReset: "weekly" });
    const room = budget!.rooms.find((r) => r.resource === LeaseResource.LEASE_RESOURCE_KEY_CREDIT)!;
    expect(room.granted).toBeGreaterThanOrEqual(1_000n);
    expect(room.granted).toBeLessThanOrEqual(3_000n);

    // Another edge asks for more than the key has left: refused, naming the limit and the reset.
    await expect(grant(accountId, keyId, 3_000n)).rejects.toThrow(
      /spend limit of \$0\.003 per week .*resets at 2030-01-14T00:00:00\+00:00/,
    );
    expect(await refusal(grant(accountId, keyId, 3_000n))).toBe("key_limit_exceeded");
    // A request without max_tokens that can be served smaller takes what the key has left.
    const { lease: smaller } = await grant(accountId, keyId, 3_000n, 100n);
    expect(smaller!.credit!.granted).toBeLessThan(3_000n);
    expect(smaller!.credit!.granted).toBeGreaterThanOrEqual(100n);
    const held = await t.query<{ v: string }>(
      `select sum(granted)::text as v from lease_allowances where scope = $1 and resource = 'key_credit'`,
      [keyId],
    );
    expect(BigInt(held[0]!.v)).toBeLessThanOrEqual(3_000n);
    // Another key of the account is not limited by it.
    const { lease: free } = await grant(accountId, randomUUID(), 3_000n);
    expect(free!.credit!.granted).toBeGreaterThanOrEqual(3_000n);
  });

  it("SetKeyLimit refuses a negative limit, an unknown reset, and another account's key", async () => {
    const accountId = randomUUID();
    const keyId = randomUUID();
    expect(await refusal(t.client.setKeyLimit({ accountId, keyId, limitMicros: -1n, limitReset: "" }))).toBe(
      "invalid_request",
    );
    expect(await refusal(t.client.setKeyLimit({ accountId, keyId, limitMicros: 1n, limitReset: "hourly" }))).toBe(
      "invalid_request",
    );
    await t.client.setKeyLimit({ accountId, keyId, limitMicros: 1n, limitReset: "" });
    expect(
      await refusal(t.client.setKeyLimit({ accountId: randomUUID(), keyId, limitMicros: 5n, limitReset: "" })),
    ).toBe("not_found");
    const { limits } = await t.client.listKeyLimits({ accountId, keyIds: [keyId, randomUUID()] });
    expect(limits).toHaveLength(2);
    expect(limits[0]).toMatchObject({ keyId, limitMicros: 1n, limitReset: "", resetsAt: "" });
    expect(limits[1]!.limitMicros).toBeUndefined();
  });
});
