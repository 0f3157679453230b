import { describe, expect, it } from "vitest";
import { LeaseResource, LeaseStatus, type LeaseRoom, type LeaseState } from "@mkt/proto/billing/v1/leases";
import { HeldLease } from "../src/leases/held-lease.ts";
import { planHeartbeat, REPORT_ORDER, type HeartbeatRules } from "../src/leases/heartbeat-plan.ts";

const TTL = 2_000;
const NOW = 100;
const rules: HeartbeatRules = { ttlMs: TTL, idleMs: 60_000, grantingFor: () => false };

const room = (id: string, resource: LeaseResource, endsInMs = 0n): LeaseRoom => ({
  allowanceId: id,
  resource,
  granted: 10_000n,
  startsInMs: 0n,
  validForMs: 2_000n,
  endsInMs,
});

/** A lease as one reply (sent at 0, received at 1) left it: valid until 1,990 on the edge's clock. */
function lease(leaseId: string, options: { validForMs?: bigint; minuteEndsInMs?: bigint } = {}): HeldLease {
  const state: LeaseState = {
    leaseId,
    accountId: `account-${leaseId}`,
    status: LeaseStatus.LEASE_STATUS_OPEN,
    validForMs: options.validForMs ?? 2_000n,
    credit: room(`${leaseId}-credit`, LeaseResource.LEASE_RESOURCE_UNSPECIFIED),
    rooms: [room(`${leaseId}-rpm`, LeaseResource.LEASE_RESOURCE_REQUESTS_PER_MINUTE, options.minuteEndsInMs ?? 0n)],
    budgets: [],
    keyBudgets: [],
    appliedSequence: 0n,
    limitPerMinute: 60n,
  };
  const held = new HeldLease(state, "free", 0);
  held.apply(state, { sequence: 1n, sentAt: 0, receivedAt: 1, marginMs: 10 });
  held.lastAdmittedAt = NOW;
  return held;
}

function changed(id: string) {
  const held = lease(id);
  held.changed = true;
  return held;
}

/** Idle for 2 TTL with its credit lent far beyond its largest worst case. */
function idleWithCredit(id: string) {
  const held = lease(id);
  held.lastAdmittedAt = NOW - 2 * TTL - 1;
  held.largestWorstCase = 100n;
  return held;
}

/** Used this minute, which ends within 2 TTL, with no room of the next minute yet. */
function minuteEnding(id: string) {
  const held = lease(id, { minuteEndsInMs: 1_000n });
  held.rooms[0]!.admitted = 1n;
  return held;
}

const open = (...leases: HeldLease[]) => leases.map((l) => ({ lease: l, retired: false }));
const ids = (leases: HeldLease[]) => leases.map((l) => l.leaseId);

describe("planning a heartbeat", () => {
  it("orders its reasons by one typed table: what only a reply renews or closes, then changes, then give-backs", () => {
    expect(REPORT_ORDER.final).toBe(REPORT_ORDER.lapsed);
    expect(REPORT_ORDER.lapsed).toBeLessThan(REPORT_ORDER.changed);
    expect(REPORT_ORDER.changed).toBe(REPORT_ORDER.unanswered);
    expect(REPORT_ORDER.changed).toBeLessThan(REPORT_ORDER.slots);
    expect(REPORT_ORDER.slots).toBeLessThan(REPORT_ORDER["idle credit"]);
  });

  it("leaves a lease nothing happened to to the session, and reports one that changed", () => {
    const quiet = lease("quiet");
    const busy = changed("busy");
    const plan = planHeartbeat(open(quiet, busy), NOW, rules);
    expect(plan.reports).toEqual([
      { lease: busy, reason: "changed", final: false, nextWindow: false, keepSpareCredit: undefined },
    ]);
    expect(plan.unreported).toEqual([quiet]);
    expect(plan.retire).toEqual([]);
  });

  it("reports a lease whose last report has no reply yet, and one past its validity", () => {
    const unanswered = lease("unanswered");
    unanswered.lastReportSequence = 2n;
    const lapsed = lease("lapsed", { validForMs: 50n });
    const plan = planHeartbeat(open(unanswered, lapsed), NOW, rules);
    expect(plan.reports.map((r) => [r.lease.leaseId, r.reason, r.final])).toEqual([
      ["lapsed", "lapsed", false],
      ["unanswered", "unanswered", false],
    ]);
  });

  it("makes final a lease idle for LEASE_IDLE_MS (retired first) and one already retired", () => {
    const idle = lease("idle");
    idle.lastAdmittedAt = NOW - 60_001;
    const busyButIdle = lease("in-flight");
    busyButIdle.lastAdmittedAt = NOW - 60_001;
    busyButIdle.inFlight = 1;
    const retired = lease("retired");
    const plan = planHeartbeat([...open(idle, busyButIdle), { lease: retired, retired: true }], NOW, rules);
    expect(plan.retire).toEqual([idle]);
    expect(plan.reports.filter((r) => r.final).map((r) => r.lease)).toEqual([idle, retired]);
    expect(plan.reports.every((r) => r.reason === "final" || !r.final)).toBe(true);
  });

  it("gives back an idle lease's credit beyond its largest worst case, a few leases a beat, never with a grant in flight", () => {
    const a = idleWithCredit("a");
    const b = idleWithCredit("b");
    const c = idleWithCredit("c");
    const plan = planHeartbeat(open(a, b, c), NOW, {
      ...rules,
      maxIdleShrinks: 2,
      grantingFor: (accountId) => accountId === "account-b",
    });
    expect(plan.reports.map((r) => [r.lease.leaseId, r.reason, r.keepSpareCredit])).toEqual([
      ["a", "idle credit", 100n],
      ["c", "idle credit", 100n],
    ]);
    expect(plan.unreported).toEqual([b]);
  });

  it("asks for the next minute's room ahead of changes when the minute ends within 2 TTL", () => {
    const busy = changed("busy");
    const ending = minuteEnding("ending");
    const plan = planHeartbeat(open(busy, ending), NOW, { ...rules, maxReports: 1 });
    expect(plan.reports).toEqual([
      { lease: ending, reason: "next window", final: false, nextWindow: true, keepSpareCredit: undefined },
    ]);
    expect(plan.unreported).toEqual([busy]);
  });

  it("reports the most urgent within its cap and leaves the rest to the next beats", () => {
    const busy = changed("busy");
    const idle = idleWithCredit("idle");
    const lapsed = lease("lapsed", { validForMs: 50n });
    const retired = lease("retired");
    const quiet = lease("quiet");
    const candidates = [...open(idle, busy, quiet, lapsed), { lease: retired, retired: true }];
    const plan = planHeartbeat(candidates, NOW, { ...rules, maxReports: 3 });
    expect(ids(plan.reports.map((r) => r.lease))).toEqual(["lapsed", "retired", "busy"]);
    expect(ids(plan.unreported).sort()).toEqual(["idle", "quiet"]);
  });
});
