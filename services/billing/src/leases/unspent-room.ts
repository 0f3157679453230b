import { billingDb } from "../billing-db.ts";
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
  const db = await billingDb(em);
  const rows = await db
    .selectFrom("lease_allowances as a")
    .innerJoin("leases as l", "l.id", "a.lease_id")
    .select((eb) => [
      "a.resource",
      // Settlement releases an admitted request's worst case before the edge's next report may
      // have counted it as admitted: credit already settled is never unspent.
      eb.fn
        .coalesce(
          eb.fn.sum<string>(
            eb(
              "a.granted",
              "-",
              eb
                .case()
                .when("a.resource", "=", "credit")
                .then(eb.fn<string>("greatest", ["a.admitted", "l.settled_micros"]))
                .else(eb.ref("a.admitted"))
                .end(),
            ),
          ),
          eb.lit(0),
        )
        .as("unspent"),
    ])
    .where("l.account_id", "=", accountId)
    .where("l.status", "<>", "closed")
    .where("a.scope", "=", "")
    .where((eb) =>
      eb.or([
        eb("a.resource", "=", "credit"),
        // Windows compared as the driver reads them (BillingDb): as text, in UTC.
        eb.and([eb("a.resource", "=", "requests_minute"), eb("a.window_start", "=", minuteStart.toISOString())]),
        eb.and([eb("a.resource", "=", "requests_day"), eb("a.window_start", "=", dayStart.toISOString())]),
      ]),
    )
    .groupBy("a.resource")
    .execute();
  const of = (resource: string) => int8(rows.find((r) => r.resource === resource)?.unspent);
  return { credit: of("credit"), minute: of("requests_minute"), day: of("requests_day") };
}

/** The same for a subscription's budgets: plan requests lent ahead of demand in the minute. */
export async function unspentPlanRequests(em: Em, subscriptionId: string, minuteStart: Date): Promise<bigint> {
  const db = await billingDb(em);
  const row = await db
    .selectFrom("lease_allowances as a")
    .innerJoin("leases as l", "l.id", "a.lease_id")
    .select((eb) =>
      eb.fn.coalesce(eb.fn.sum<string>(eb("a.granted", "-", eb.ref("a.admitted"))), eb.lit(0)).as("unspent"),
    )
    .where("l.status", "<>", "closed")
    .where("a.scope", "=", subscriptionId)
    .where("a.resource", "=", "sub_requests_minute")
    .where("a.window_start", "=", minuteStart.toISOString())
    .executeTakeFirst();
  return int8(row?.unspent);
}
