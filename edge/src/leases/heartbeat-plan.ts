import { nextWindowAheadMs } from "@mkt/runtime/next-window";
import type { HeldLease } from "./held-lease.ts";

/** Why a heartbeat reports a lease; a lease with none is extended by the session alone. */
export type ReportReason = "final" | "lapsed" | "changed" | "unanswered" | "next window" | "slots" | "idle credit";

/** Which reports a beat carries first (lower first): those only a reply can renew or close, then changes. */
export const REPORT_ORDER: Readonly<Record<ReportReason, number>> = {
  final: 0,
  lapsed: 0,
  changed: 1,
  unanswered: 1,
  "next window": 2,
  slots: 2,
  "idle credit": 3,
};

/**
 * Leases one heartbeat reports, at most. Billing answers a heartbeat within its timeout (TTL −
 * margin) only if it is not too large: one that failed leaves every lease it carried unanswered, and if the next carried them
 * all again, with what changed meanwhile, it would fail as well, while the leases lapse and every
 * request waits on a grant (measured: 1,000 sparse accounts on a busy 2-core machine). Leases over
 * the cap are reported in the next beats, the most urgent first.
 */
export const MAX_REPORTS_PER_BEAT = 256;

/**
 * Idle leases whose credit one heartbeat gives back, at most: the room they hold is no one's use
 * and goes back a beat later just as well, while one heartbeat carrying every lease that went
 * idle together (after a burst on many accounts) can take longer than its timeout to answer.
 */
export const MAX_IDLE_SHRINKS_PER_BEAT = 32;

/** A lease the edge holds, and whether it has stopped using it (reported final until billing closes it). */
export interface BeatCandidate {
  lease: HeldLease;
  retired: boolean;
}

export interface HeartbeatRules {
  ttlMs: number;
  /** LEASE_IDLE_MS: a lease with nothing admitted or in flight this long goes final. */
  idleMs: number;
  maxReports?: number;
  maxIdleShrinks?: number;
  /** Whether a grant of the account is in flight (its reply, older than the beat's, may grow the lease). */
  grantingFor(accountId: string): boolean;
}

export interface PlannedReport {
  lease: HeldLease;
  reason: ReportReason;
  /** The edge admits nothing more on it: billing closes it on this report. */
  final: boolean;
  /** It asks for the next window's room, by its last demand when it has none now. */
  nextWindow: boolean;
  /** An idle lease gives back its credit beyond this (its largest worst case). */
  keepSpareCredit: bigint | undefined;
}

export interface HeartbeatPlan {
  /** Leases in use that go final in this beat: the edge stops admitting on them before it reports. */
  retire: HeldLease[];
  /** What the beat reports, most urgent first, within the cap. */
  reports: PlannedReport[];
  /** The rest: extended by the reply's session validity unless billing lists them. */
  unreported: HeldLease[];
}

/**
 * What one heartbeat sent at `now` reports, and in what order. Final: a lease fenced, retired, or
 * idle for LEASE_IDLE_MS (past its validity is not final: the reply renews it or says it is
 * fenced). Otherwise a lease goes when only a report tells billing something it needs
 * (reportReason) or when a window it used is ending (nextWindow). The most urgent go first, up to
 * the cap; the others wait for the next beat, extended by the session meanwhile.
 */
export function planHeartbeat(candidates: readonly BeatCandidate[], now: number, rules: HeartbeatRules): HeartbeatPlan {
  const maxReports = rules.maxReports ?? MAX_REPORTS_PER_BEAT;
  const maxShrinks = rules.maxIdleShrinks ?? MAX_IDLE_SHRINKS_PER_BEAT;
  const retire: HeldLease[] = [];
  const unreported: HeldLease[] = [];
  const due: Array<PlannedReport & { urgency: number }> = [];
  let shrinks = 0;
  for (const { lease, retired } of candidates) {
    const idle = lease.inFlight === 0 && now - lease.lastAdmittedAt > rules.idleMs;
    const final = !lease.open || idle || retired;
    if (final && !retired) retire.push(lease);
    const nextWindow = !final && lease.windowEnding(now, nextWindowWithinMs(lease, rules.ttlMs));
    const reason = final ? "final" : (reportReason(lease, now, rules) ?? (nextWindow ? "next window" : undefined));
    if (!reason || (reason === "idle credit" && shrinks++ >= maxShrinks)) {
      unreported.push(lease);
      continue;
    }
    const keepSpareCredit = reason === "idle credit" ? lease.largestWorstCase : undefined;
    const urgency = urgencyOf(lease, reason, nextWindow, now, rules.ttlMs);
    due.push({ lease, reason, final, nextWindow, keepSpareCredit, urgency });
  }
  due.sort((a, b) => a.urgency - b.urgency);
  for (const { lease } of due.slice(maxReports)) unreported.push(lease);
  const reports = due.slice(0, maxReports).map(({ urgency: _, ...report }) => report);
  return { retire, reports, unreported };
}

/**
 * Why an open lease goes in this heartbeat, or undefined when the session alone extends it:
 * admitted totals or demand changed; its last report has no reply applied yet (lost: billing may
 * not have it); it is past its validity here; slots lent beyond those in flight go back; or, idle
 * for 2 TTL, it holds more credit than one request's worst case (never with a grant of the account
 * in flight, whose older reply could bring the room back).
 */
export function reportReason(lease: HeldLease, now: number, rules: HeartbeatRules): ReportReason | undefined {
  if (lease.changed) return "changed";
  if (lease.lastReplySequence < lease.lastReportSequence) return "unanswered";
  if (!lease.usable(now)) return "lapsed";
  if (lease.slotsToReturn()) return "slots";
  const idle = lease.inFlight === 0 && now - lease.lastAdmittedAt > 2 * rules.ttlMs;
  if (idle && lease.credit && lease.spare(lease.credit) > lease.largestWorstCase) {
    if (!rules.grantingFor(lease.accountId)) return "idle credit";
  }
  return undefined;
}

/**
 * Where a due report goes in the beat's order (lower first). A lease asking for the next window's
 * room within 2 TTL of the boundary goes with those only a reply can renew: deferred again it
 * would reach the boundary without the room, and its next request would wait on a grant. Without
 * this, 1,000 sparse accounts whose minutes all end together (a report each spread over the last
 * seconds, besides ~200 changed leases a beat) passed the per-beat cap, and the reports left for
 * last, those nearest the boundary, were the ones that missed it (5% of the accounts made a
 * second grant each minute).
 */
function urgencyOf(lease: HeldLease, reason: ReportReason, nextWindow: boolean, now: number, ttlMs: number): number {
  if (nextWindow && lease.windowEnding(now, 2 * ttlMs)) return 0;
  return REPORT_ORDER[reason];
}

/**
 * How long before the end of a window it used a lease asks for the next one's room: between one
 * TTL and nextWindowAheadMs − TTL, at a point of its own (from its id), so that an edge's leases
 * used in a minute do not all ask in its last heartbeat.
 */
export function nextWindowWithinMs(lease: HeldLease, ttlMs: number): number {
  const spread = Math.max(0, nextWindowAheadMs(ttlMs) - 2 * ttlMs);
  const point = Number.parseInt(lease.leaseId.slice(0, 8), 16);
  return ttlMs + (Number.isNaN(point) ? 0 : (point / 2 ** 32) * spread);
}
