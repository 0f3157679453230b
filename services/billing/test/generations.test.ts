import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newRequestId } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { REQUEST_CHARGE_SQL, settleOnLease, startTestBilling, type TestBilling } from "./billing-harness.ts";

// GetGeneration (GET /v1/generations/{id}): what settlement records of an answer, read back for
// its owner only. Real billing, Postgres and JetStream.
let t: TestBilling;
beforeAll(async () => {
  t = await startTestBilling();
});
afterAll(async () => {
  await t?.close();
});

const answer = { latencyMs: 900n, timeToFirstTokenMs: 120n, finishReason: "length" };

/** The customer's charge as the ledger posted it: its record's cost, in its batch entry's customer leg (REQUEST_CHARGE_SQL). */
async function postedCharge(requestId: string): Promise<bigint> {
  const [row] = await t.query<{ v: string | null }>(REQUEST_CHARGE_SQL, [requestId]);
  return BigInt(row?.v ?? "0");
}

async function settle(event: Partial<UsageCompleted>) {
  await t.publishUsage(event);
  await t.waitSettled();
}

describe("GetGeneration", () => {
  it("returns a request settled on its lease, with the charge the ledger posted", async () => {
    const req = await settleOnLease(t, {
      accountId: randomUUID(),
      worstCaseMicros: 350n,
      inputTokens: 100n,
      outputTokens: 150n,
      startedAt: new Date().toISOString(),
      ...answer,
    });
    const { generation } = await t.client.getGeneration({ accountId: req.accountId, requestId: req.requestId });
    expect(generation).toMatchObject({
      requestId: req.requestId,
      modelId: "demo-small",
      provider: "local",
      hosterId: "",
      inputTokens: 100n,
      outputTokens: 150n,
      costMicros: 275n, // ceil((100 × 0.50 + 150 × 1.50) / 1M USD)
      latencyMs: 900n,
      timeToFirstTokenMs: 120n,
      finishReason: "length",
      success: true,
      errorCode: "",
    });
    expect(generation!.costMicros).toBe(await postedCharge(req.requestId));
    expect(Date.parse(generation!.createdAt)).toBeGreaterThan(Date.now() - 60_000);
  });

  it("returns a failed request without a first token, charged for what it used", async () => {
    const accountId = randomUUID();
    const { requestId } = await settleOnLease(t, {
      accountId,
      worstCaseMicros: 2_000n,
      inputTokens: 40n,
      outputTokens: 3n,
      success: false,
      errorCode: "upstream_timeout",
      finishReason: "error",
      latencyMs: 30_000n,
      startedAt: new Date().toISOString(),
    });
    const { generation } = await t.client.getGeneration({ accountId, requestId });
    expect(generation).toMatchObject({
      costMicros: await postedCharge(requestId),
      timeToFirstTokenMs: undefined,
      finishReason: "error",
      success: false,
      errorCode: "upstream_timeout",
    });
    expect(generation!.costMicros).toBeGreaterThan(0n);
  });

  it("is not_found for another account's request, another subscription's, an unknown or empty id", async () => {
    const accountId = randomUUID();
    // A random (v4) id, as every request had before ids became UUIDv7: its record is found too.
    const requestId = randomUUID();
    // No hold: recorded at no cost, still the account's request.
    const startedAt = new Date().toISOString();
    await settle({
      requestId,
      accountId,
      keyId: "k",
      modelId: "demo-small",
      provider: "local",
      success: true,
      startedAt,
    });
    expect((await t.client.getGeneration({ accountId, requestId })).generation).toMatchObject({ costMicros: 0n });

    const refusal = (request: Parameters<TestBilling["client"]["getGeneration"]>[0]) =>
      t.client.getGeneration(request).then(
        () => undefined,
        (err: unknown) => AppError.fromGrpc(err).code,
      );
    expect(await refusal({ accountId: randomUUID(), requestId })).toBe("not_found");
    // A scoped key reads only its subscription's requests.
    expect(await refusal({ accountId, requestId, subscriptionId: randomUUID() })).toBe("not_found");
    expect(await refusal({ accountId, requestId: randomUUID() })).toBe("not_found");
    expect(await refusal({ accountId, requestId: newRequestId() })).toBe("not_found");
    expect(await refusal({ accountId, requestId: "" })).toBe("not_found");
    expect(await refusal({ accountId, requestId: "x".repeat(500) })).toBe("not_found");
    expect(await refusal({ accountId, requestId: "req_1' or true --" })).toBe("not_found");
    expect(await refusal({ accountId: "not-a-uuid", requestId })).toBe("invalid_request");
  });
});
