import { describe, expect, it } from "vitest";
import type { InHand } from "../src/leases/admission-need.ts";
import { GrantCoalescer, type GrantBatch } from "../src/leases/grant-coalescer.ts";
import { scopeKey } from "../src/leases/scope-key.ts";

const need = (credit: bigint): InHand => ({ requests: 1n, credit, tokens: 10n, minCredit: 0n, likelyCredit: credit });

/** A grant that answers when told to, recording what it was sent. */
function grants() {
  const sent: Array<{ inHand: InHand; members: number }> = [];
  let answer!: (members: number) => void;
  const send = (inHand: InHand, members: number) => {
    sent.push({ inHand: { ...inHand }, members });
    return new Promise<number>((resolve) => (answer = resolve));
  };
  return { sent, send, answer: (n: number) => answer(n) };
}

const batchOf = (step: { batch: GrantBatch<number> } | { wait: Promise<void> }) => {
  if (!("batch" in step)) throw new Error("expected a batch");
  return step.batch;
};

describe("the grant coalescer", () => {
  it("makes one grant for the requests of a scope that run short in one turn, sized for all", async () => {
    const coalescer = new GrantCoalescer<number>();
    const g = grants();
    const key = scopeKey("a");
    const first = batchOf(coalescer.next(key, need(100n), false, g.send));
    const second = batchOf(coalescer.next(key, need(50n), false, g.send));
    expect(second).toBe(first);
    expect(coalescer.grantingFor("a")).toBe(true);
    expect(g.sent).toEqual([]);

    await new Promise((resolve) => setImmediate(resolve));
    expect(g.sent).toEqual([{ inHand: { ...need(150n), requests: 2n, tokens: 20n }, members: 2 }]);
    // Gone out: a request short now waits for it and looks at its lease again.
    const late = coalescer.next(key, need(1n), false, g.send);
    expect("wait" in late).toBe(true);

    g.answer(7);
    expect(await first.done).toBe(7);
    await (late as { wait: Promise<void> }).wait;
    expect(coalescer.grantingFor("a")).toBe(false);
    expect(g.sent).toHaveLength(1);
  });

  it("sends a request that must ask alone at once, and makes others wait for it rather than join", async () => {
    const coalescer = new GrantCoalescer<number>();
    const g = grants();
    const key = scopeKey("a", { subscriptionId: "s" });
    const alone = batchOf(coalescer.next(key, { ...need(100n), minCredit: 10n }, true, g.send));
    expect(g.sent).toHaveLength(1);
    expect("wait" in coalescer.next(key, need(1n), false, g.send)).toBe(true);
    g.answer(1);
    expect(await alone.done).toBe(1);
  });

  it("keeps scopes apart: another key's request starts its own grant", async () => {
    const coalescer = new GrantCoalescer<number>();
    const g = grants();
    const own = batchOf(coalescer.next(scopeKey("a"), need(1n), false, g.send));
    const keyed = batchOf(coalescer.next(scopeKey("a", { keyId: "k" }), need(1n), false, g.send));
    expect(keyed).not.toBe(own);
    expect(keyed.members).toBe(1);
  });

  it("frees the scope when a grant fails, and waiters go on", async () => {
    const coalescer = new GrantCoalescer<number>();
    const key = scopeKey("a");
    const failing = batchOf(coalescer.next(key, need(1n), true, () => Promise.reject(new Error("down"))));
    const waiting = coalescer.next(key, need(1n), false, () => Promise.resolve(0));
    await expect(failing.done).rejects.toThrow("down");
    await expect((waiting as { wait: Promise<void> }).wait).resolves.toBeUndefined();
    expect(coalescer.grantingFor("a")).toBe(false);
  });
});
