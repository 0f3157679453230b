import { describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import type { InHand } from "../src/leases/admission-need.ts";
import { admitOrGrant, MAX_GRANTS_PER_REQUEST, type ColdPath, type GrantAnswer } from "../src/leases/admit-or-grant.ts";
import { GrantCoalescer } from "../src/leases/grant-coalescer.ts";
import type { Ticket } from "../src/leases/lease-admission.ts";
import { RefusalCache } from "../src/leases/refusal-cache.ts";
import { scopeKey } from "../src/leases/scope-key.ts";

const key = scopeKey("a");
const need = (credit: bigint): InHand => ({ requests: 1n, credit, tokens: 0n, minCredit: 0n, likelyCredit: 0n });
const ticket = {} as Ticket;
const noCredit = new AppError("insufficient_credits", "no credit");

/** A cold path whose grants answer with `answer` (after the turn a batch waits), counted. */
function coldPath(answer: (inHand: InHand, members: number) => GrantAnswer | AppError, endedUnreported = false) {
  const sent: Array<{ inHand: InHand; members: number }> = [];
  const path: ColdPath = {
    ttlMs: 2_000,
    now: () => 0,
    inUse: () => undefined,
    beating: () => undefined,
    refusals: new RefusalCache(2_000),
    slotsEndedUnreported: () => endedUnreported,
    grants: new GrantCoalescer<GrantAnswer>(),
    grant: async (_key, _tier, inHand, members) => {
      sent.push({ inHand: { ...inHand }, members });
      const answered = answer(inHand, members);
      if (answered instanceof AppError) throw answered;
      return answered;
    },
  };
  return { path, sent };
}

describe("admitting from memory or through a grant", () => {
  it("admits from memory with no grant", async () => {
    const { path, sent } = coldPath(() => ({ includedCrossing: false }));
    expect(await admitOrGrant(path, key, "free", need(1n), () => ({ ok: ticket }))).toBe(ticket);
    expect(sent).toEqual([]);
  });

  it("asks billing once when short, then admits on what it granted", async () => {
    let granted = false;
    const { path, sent } = coldPath(() => ((granted = true), { includedCrossing: false }));
    const admitted = await admitOrGrant(path, key, "free", need(1n), () =>
      granted ? { ok: ticket } : { short: true },
    );
    expect(admitted).toBe(ticket);
    expect(sent).toHaveLength(1);
  });

  it("answers from a cached refusal without a grant, never over room the lease still has", async () => {
    const { path, sent } = coldPath(() => ({ includedCrossing: false }));
    path.refusals.remember(key, noCredit, 0, need(5n));
    await expect(admitOrGrant(path, key, "free", need(5n), () => ({ short: true }))).rejects.toBe(noCredit);
    expect(await admitOrGrant(path, key, "free", need(5n), () => ({ ok: ticket }))).toBe(ticket);
    expect(sent).toEqual([]);
  });

  it("asks billing past a cached slots 429 once a call ended on a retired lease unreported, past no other refusal", async () => {
    const tooMany = new AppError("concurrency_limit_exceeded", "max_concurrent reached");
    let granted = false;
    const { path, sent } = coldPath(() => ((granted = true), { includedCrossing: false }), true);
    path.refusals.remember(key, tooMany, 0, need(1n));
    const admitted = await admitOrGrant(path, key, "free", need(1n), () =>
      granted ? { ok: ticket } : { short: true },
    );
    expect(admitted).toBe(ticket);
    expect(sent).toHaveLength(1);
    // Nothing ended unreported: the same 429 is answered from the cache; an rpm 429 and a 402 are
    // either way (an ended call frees neither).
    const quiet = coldPath(() => ({ includedCrossing: false }));
    quiet.path.refusals.remember(key, tooMany, 0, need(1n));
    await expect(admitOrGrant(quiet.path, key, "free", need(1n), () => ({ short: true }))).rejects.toBe(tooMany);
    const poor = coldPath(() => ({ includedCrossing: false }), true);
    poor.path.refusals.remember(key, noCredit, 0, need(5n));
    await expect(admitOrGrant(poor.path, key, "free", need(5n), () => ({ short: true }))).rejects.toBe(noCredit);
    const rpm = new AppError("rate_limit_exceeded", "rpm reached");
    const busy = coldPath(() => ({ includedCrossing: false }), true);
    busy.path.refusals.remember(key, rpm, 0, need(1n));
    await expect(admitOrGrant(busy.path, key, "free", need(1n), () => ({ short: true }))).rejects.toBe(rpm);
    expect([quiet.sent, poor.sent, busy.sent]).toEqual([[], [], []]);
  });

  it("gives up with a 503 after its grants' room kept going to others", async () => {
    const { path, sent } = coldPath(() => ({ includedCrossing: false }));
    const refused = await admitOrGrant(path, key, "free", need(1n), () => ({ short: true })).catch((e: unknown) => e);
    expect(refused).toMatchObject({ httpStatus: 503 });
    expect(sent).toHaveLength(MAX_GRANTS_PER_REQUEST);
  });

  it("asks alone for each request of a refused shared grant: the balance may pay some of them", async () => {
    // Billing pays one request of 5 but not two together.
    const paid = new Set<number>();
    let calls = 0;
    const { path, sent } = coldPath((inHand, members) => {
      if (members > 1 || inHand.credit > 5n) return noCredit;
      paid.add((calls += 1));
      return { includedCrossing: false };
    });
    const admit = () => {
      let mine: number | undefined;
      return admitOrGrant(path, key, "free", need(5n), () => {
        const next = mine === undefined ? [...paid][0] : undefined;
        if (next !== undefined) {
          mine = next;
          paid.delete(next);
        }
        return mine === undefined ? { short: true } : { ok: ticket };
      });
    };
    const results = await Promise.allSettled([admit(), admit()]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "fulfilled"]);
    expect(sent.map((s) => s.members)).toEqual([2, 1, 1]);
  });

  it("waits once for the heartbeat on the way when its lease lapsed, instead of a grant", async () => {
    const { path, sent } = coldPath(() => ({ includedCrossing: false }));
    let renewed = false;
    const lapsed = { open: true, validUntil: -1 } as never;
    const beat = new Promise<void>((resolve) => setTimeout(() => ((renewed = true), resolve()), 5));
    const admitted = await admitOrGrant(
      { ...path, inUse: () => lapsed, beating: () => beat },
      key,
      "free",
      need(1n),
      () => (renewed ? { ok: ticket } : { short: true }),
    );
    expect(admitted).toBe(ticket);
    expect(sent).toEqual([]);
  });
});
