import { int8, type Em } from "../context.ts";
import { currentWindows } from "../rate-limits/rate-limiter.ts";

/**
 * What the account's leases hold that their edges have not reported admitting: credit and
 * request room lent ahead of demand (docs/leases.md#how-much-room-an-edge-gets). It is held and
 * counted so that no edge can overspend, but it is nobody's use yet, so reports add it back to the
 * balance and take it off the windows' counts: they show the account as its edges last reported
 * using it (trailing admission by at most one heartbeat). A closed lease holds only what was
 * admitted.
 */
export async function unspentRoom(
  em: Em,
  accountId: string,
  now: Date,
): Promise<{ credit: bigint; minute: bigint; day: bigint }> {
  const { minuteStart, dayStart } = currentWindows(now);
  const rows = await em.execute(
    // Settlement releases an admitted request's worst case before the edge's next report may
    // have counted it as admitted: credit already settled is never unspent.
    `select a.resource,
       coalesce(sum(a.granted - case when a.resource = 'credit' then greatest(a.admitted, l.settled_micros)
         else a.admitted end), 0) as unspent
     from lease_allowances a join leases l on l.id = a.lease_id
     where l.account_id = ? and l.status <> 'closed' and a.scope = ''
       and (a.resource = 'credit' or (a.resource = 'requests_minute' and a.window_start = ?)
         or (a.resource = 'requests_day' and a.window_start = ?))
     group by a.resource`,
    [accountId, minuteStart, dayStart],
  );
  const of = (resource: string) => int8(rows.find((r) => r.resource === resource)?.unspent);
  return { credit: of("credit"), minute: of("requests_minute"), day: of("requests_day") };
}

/** The same for a subscription's budgets: plan requests lent ahead of demand in the minute. */
export async function unspentPlanRequests(em: Em, subscriptionId: string, minuteStart: Date): Promise<bigint> {
  const [row] = await em.execute(
    `select coalesce(sum(a.granted - a.admitted), 0) as unspent
     from lease_allowances a join leases l on l.id = a.lease_id
     where l.status <> 'closed' and a.scope = ? and a.resource = 'sub_requests_minute' and a.window_start = ?`,
    [subscriptionId, minuteStart],
  );
  return int8(row?.unspent);
}
