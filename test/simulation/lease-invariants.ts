import { LeaseResource } from "@mkt/proto/billing/v1/leases";
import type { HeldLease, Room } from "../../edge/src/leases/held-lease.ts";
import type { LeaseWorld } from "./lease-world.ts";

/** The invariants checked after every step (docs/leases.md#the-protocol-simulated). */
export const INVARIANTS = [
  "admitted ≤ granted: every room an edge admits on stays within what billing granted it (within the final totals once closed)",
  "a wallet's hold is the sum of its leases' holds, never negative, never above its posted balance",
  "no overspend: each lease holds at least the worst cases of its running and unsettled requests; nothing is written off",
  "a closed incarnation admits nothing: once an edge's new incarnation is known, the older process's leases are all closed, and a process still running under the id admits no request",
  "slots: the subscriber's running calls never exceed max_concurrent, and billing counts a slot for each",
  "rate windows: no account or subscription is counted past its per-minute limit",
] as const;

/** What the quiet points check: every fault healed and every call ended. */
export const QUIET_INVARIANTS = [
  "every slot returns once its call ends: billing holds no slot of the subscriber",
  "the subscriber is served its full max_concurrent at once, with no 429",
] as const;

const SLOTS = LeaseResource.LEASE_RESOURCE_SLOTS;

function roomsOf(lease: HeldLease): Room[] {
  const rooms = [...(lease.credit ? [lease.credit] : []), ...lease.rooms];
  for (const budget of lease.budgets.values()) rooms.push(...budget.rooms);
  for (const key of lease.keyBudgets.values()) rooms.push(...key.rooms);
  return rooms;
}

/**
 * Every lease a live process admits on or has calls running on (a retired lease admits nothing).
 * A superseded process's are left out: billing closed and released them all (checked below).
 */
function liveLeases(world: LeaseWorld): HeldLease[] {
  const leases = new Set<HeldLease>();
  for (const edge of world.processes()) {
    if (edge.dead || edge.superseded) continue;
    for (const accountId of [...world.accounts, world.subscriber.accountId]) {
      const lease = edge.table.leaseOf(accountId);
      if (lease) leases.add(lease);
    }
  }
  for (const call of world.running()) leases.add(call.ticket!.lease);
  return [...leases];
}

/** Checks every invariant against the edges' memory and billing's rows; returns what broke. */
export async function checkInvariants(world: LeaseWorld): Promise<string[]> {
  const broken: string[] = [];
  const q = world.sim.t.query.bind(world.sim.t);

  // Admitted ≤ granted, per allowance (a lease's room in one window), on both sides.
  const leases = liveLeases(world);
  const rooms = leases.flatMap((lease) => roomsOf(lease).map((room) => ({ lease, room })));
  const rows = await q<{
    id: string;
    resource: string;
    granted: string;
    admitted: string;
    status: string;
    released: boolean;
  }>(
    `select a.id, a.resource, a.granted::text, a.admitted::text, l.status, l.released_at is not null as released
     from lease_allowances a join leases l on l.id = a.lease_id where a.id = any($1::uuid[])`,
    [rooms.map((r) => r.room.allowanceId)],
  );
  const byId = new Map(rows.map((r) => [r.id, r]));
  for (const { lease, room } of rooms) {
    const where = `lease ${lease.leaseId} ${room.resource === SLOTS ? "slots" : `allowance ${room.allowanceId}`}`;
    if (room.admitted > room.granted && room.resource !== SLOTS) {
      broken.push(`${where}: the edge admitted ${room.admitted} of ${room.granted} granted`);
    }
    const row = byId.get(room.allowanceId);
    if (!row) continue;
    const granted = BigInt(row.granted);
    const admitted = BigInt(row.admitted);
    if (row.status !== "closed" && room.admitted > granted) {
      broken.push(`${where}: the edge admitted ${room.admitted}, billing granted ${granted} (${row.status})`);
    } else if (row.status === "closed" && room.admitted > admitted) {
      broken.push(`${where}: the edge admitted ${room.admitted} on a lease billing closed at ${admitted}`);
    } else if (row.released && room.resource === SLOTS && room.admitted > 0n) {
      broken.push(`${where}: ${room.admitted} calls run on slots of a released lease`);
    }
  }

  // Holds: the wallet's is its leases' sum, within its posted balance.
  const wallets = await q<{ account_id: string; posted: string; held: string; leases: string }>(
    `select w.account_id, w.posted_micros::text as posted, w.held_micros::text as held,
       (select coalesce(sum(l.held_micros), 0) from leases l where l.account_id = w.account_id)::text as leases
     from wallets w where w.account_id = any($1::uuid[])`,
    [[...world.accounts, world.subscriber.accountId]],
  );
  for (const w of wallets) {
    const [posted, held, ofLeases] = [BigInt(w.posted), BigInt(w.held), BigInt(w.leases)];
    if (held !== ofLeases) broken.push(`account ${w.account_id}: wallet holds ${held}, its leases ${ofLeases}`);
    if (held < 0n || held > posted || posted < 0n) {
      broken.push(`account ${w.account_id}: held ${held} of posted ${posted}`);
    }
  }

  // No overspend: what each lease still holds covers its running and unsettled requests.
  const owed = [
    ...world
      .running()
      .map((c) => ({ requestId: c.requestId, leaseId: c.ticket!.lease.leaseId, worstCase: c.ticket!.worstCaseMicros })),
    ...world.unsettled,
  ].filter((o) => o.worstCase > 0n);
  const uncovered = await q<{ lease_id: string; held: string; owed: string; status: string }>(
    `with owed as (select * from unnest($1::uuid[], $2::uuid[], $3::int8[]) as o(request_id, lease_id, worst_case))
     select o.lease_id, l.held_micros::text as held, sum(o.worst_case)::text as owed, l.status
     from owed o join leases l on l.id = o.lease_id
     where not exists (select 1 from usage_records r where r.request_id = o.request_id)
     group by o.lease_id, l.held_micros, l.status having sum(o.worst_case) > l.held_micros`,
    [owed.map((o) => o.requestId), owed.map((o) => o.leaseId), owed.map((o) => o.worstCase.toString())],
  );
  for (const u of uncovered) {
    broken.push(`lease ${u.lease_id} (${u.status}) holds ${u.held} for ${u.owed} of requests admitted on it`);
  }
  const settled = await q<{ request_id: string; write_off: string }>(
    `select request_id, write_off_micros::text as write_off from usage_records where request_id = any($1::uuid[])`,
    [world.unsettled.map((u) => u.requestId)],
  );
  for (const s of settled)
    if (BigInt(s.write_off) > 0n) broken.push(`request ${s.request_id} written off ${s.write_off}`);
  const done = new Set(settled.map((s) => s.request_id));
  world.unsettled = world.unsettled.filter((u) => !done.has(u.requestId));

  // A closed incarnation: once billing knows a newer one, the dead process's leases are closed.
  for (const crash of world.crashed) {
    const open = await q<{ id: string }>(
      `select l.id from leases l join edge_sessions s on s.edge_id = l.edge_id
       where l.id = any($1::uuid[]) and s.incarnation > $2 and l.status <> 'closed'`,
      [crash.leaseIds, crash.incarnation.toString()],
    );
    for (const l of open) broken.push(`lease ${l.id} of a dead process of ${crash.edgeId} is still ${"open"}`);
  }
  for (const call of world.calls.filter((c) => c.afterSuperseded)) {
    broken.push(
      `request ${call.requestId} admitted on lease ${call.ticket!.lease.leaseId} by a process of ${call.edge.id} ` +
        `(incarnation ${call.edge.incarnation}) after billing had started a newer incarnation and released its leases`,
    );
  }

  // Slots: running calls within max_concurrent, each one counted by billing.
  const running = world.running(true).length;
  if (running === 0) world.concurrencyCap = world.maxConcurrent;
  if (running > world.concurrencyCap) {
    broken.push(`the subscriber runs ${running} calls, max_concurrent ${world.concurrencyCap}`);
  }
  const held = await slotsHeld(world);
  if (held < BigInt(running)) broken.push(`billing counts ${held} slots for ${running} running calls`);

  // Rate windows.
  const counted = await q<{ account_id: string; count: string }>(
    `select account_id, count::text from rate_counters
     where "window" = 'minute' and account_id = any($1::uuid[]) and count > $2`,
    [world.accounts, world.limitPerMinute],
  );
  for (const c of counted) broken.push(`account ${c.account_id} counted ${c.count} requests in a minute`);
  return broken;
}

/** Slots billing counts as held for the subscriber (its grants read the same sum). */
export async function slotsHeld(world: LeaseWorld): Promise<bigint> {
  const [row] = await world.sim.t.query<{ held: string }>(
    `select coalesce(sum(case when l.status = 'closed' then a.admitted else a.granted end), 0)::text as held
     from lease_allowances a join leases l on l.id = a.lease_id
     where a.scope = $1 and a.resource = 'slots' and l.released_at is null`,
    [world.subscriber.subscriptionId],
  );
  return BigInt(row!.held);
}

/** The leases holding the subscriber's slots, for a failure's message. */
export async function slotHolders(world: LeaseWorld): Promise<string> {
  const rows = await world.sim.t.query(
    `select l.id, l.edge_id, l.status, a.granted::text, a.admitted::text, l.release_at
     from lease_allowances a join leases l on l.id = a.lease_id
     where a.scope = $1 and a.resource = 'slots' and l.released_at is null
       and (case when l.status = 'closed' then a.admitted else a.granted end) > 0`,
    [world.subscriber.subscriptionId],
  );
  return JSON.stringify(rows);
}
