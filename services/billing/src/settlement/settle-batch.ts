import { newId } from "@mkt/runtime/ids";
import { splitRevenue, type Micros } from "@mkt/runtime/money";
import type { Logger } from "@mkt/runtime/logger";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { Em } from "../context.ts";
import { countPeriodUsage } from "../subscriptions/period-usage.ts";
import { HOURLY_ACCUMULATE, HOURLY_COLUMNS } from "../usage/usage-records.ts";
import { ledgerAccounts } from "../wallets/ledger.ts";
import { clampTokens, reservationCharge, settleUsageEvent, type SettleOutcome } from "./settle-usage.ts";

/** One event of the common case: its reservation is still held and it has no usage record yet. */
interface Charge {
  event: UsageCompleted;
  reservation: Record<string, unknown>;
  accountId: string;
  inputTokens: bigint;
  outputTokens: bigint;
  latencyMs: bigint;
  cost: Micros;
  platformFee: Micros;
  hosterEarned: Micros;
  reserved: Micros;
}

const placeholders = (count: number, row: string) => Array.from({ length: count }, () => row).join(", ");

/**
 * Settles a batch of usage.completed events inside the caller's transaction with a fixed number
 * of statements, whatever the batch size: one round trip per table instead of ~9 per event,
 * which is what lets one consumer keep up with thousands of events a second (bench/settlement.ts).
 *
 * Only the common case is settled here: a held reservation with no usage record. Everything
 * else (duplicates, late events after expiry, events without a reservation) goes through
 * settleUsageEvent, one by one, with the same rules as before; its outcomes are the reference.
 */
export async function settleUsageBatch(
  em: Em,
  events: readonly UsageCompleted[],
  log: Logger,
  now: Date,
): Promise<SettleOutcome[]> {
  if (events.length === 0) return [];
  const requestIds = [...new Set(events.map((e) => e.requestId))];
  // Row locks in one stable order (reservations, then wallets, each sorted), so concurrent
  // settlers and the sweeper wait for each other instead of deadlocking.
  const reservations = await em.execute(
    `select * from reservations where request_id in (${placeholders(requestIds.length, "?")}) order by id for update`,
    requestIds,
  );
  const recorded = await em.execute(
    `select request_id from usage_records where request_id in (${placeholders(requestIds.length, "?")})`,
    requestIds,
  );
  const reservationOf = new Map(reservations.map((r) => [r.request_id as string, r]));
  const hasRecord = new Set(recorded.map((r) => r.request_id as string));

  const outcomes: Array<SettleOutcome | undefined> = new Array(events.length);
  const charges: Charge[] = [];
  const oneByOne: number[] = [];
  const seen = new Set<string>();
  events.forEach((event, i) => {
    const reservation = reservationOf.get(event.requestId);
    if (seen.has(event.requestId)) {
      outcomes[i] = "duplicate"; // the same request twice in one batch (replayed under another msg id)
    } else if (reservation?.status !== "held" || hasRecord.has(event.requestId)) {
      oneByOne.push(i);
    } else {
      charges.push(priced(event, reservation, log));
      outcomes[i] = "settled";
    }
    seen.add(event.requestId);
  });

  if (charges.length > 0) {
    // Subscription requests count in their period (in event order) and may be priced there.
    await countPeriodUsage(em, charges);
    for (const c of charges) Object.assign(c, splitRevenue(c.cost, c.reservation.provider === "hoster"));
    await writeCharges(em, charges, now);
  }
  for (const i of oneByOne) outcomes[i] = await settleUsageEvent(em, events[i]!, log, now);
  return outcomes as SettleOutcome[];
}

/** The charge for one event, priced as settleUsageEvent prices it. */
function priced(event: UsageCompleted, reservation: Record<string, unknown>, log: Logger): Charge {
  const { accountId, inputTokens, outputTokens, reserved, cost } = reservationCharge(event, reservation, log);
  return {
    event,
    reservation,
    accountId,
    inputTokens,
    outputTokens,
    latencyMs: clampTokens(event.latencyMs),
    cost,
    // Split once the cost is final (after countPeriodUsage): hoster routes 80/20, others all platform.
    platformFee: 0n,
    hosterEarned: 0n,
    reserved,
  };
}

async function writeCharges(em: Em, charges: Charge[], now: Date): Promise<void> {
  await postCharges(
    em,
    charges.filter((c) => c.cost > 0n),
  );
  await moveWallets(em, charges);
  const ids = charges.map((c) => c.reservation.id as string);
  await em.execute(
    `update reservations set status = 'settled', slot_released_at = coalesce(slot_released_at, ?)
     where id in (${placeholders(ids.length, "?")})`,
    [now, ...ids],
  );
  await insertUsageWithRollups(em, charges);
}

/** One balanced journal entry per charge (customer debit = platform fee + hoster earning). */
async function postCharges(em: Em, charges: Charge[]): Promise<void> {
  if (charges.length === 0) return;
  const entryIds = charges.map(() => newId());
  const inserted = await em.execute(
    `insert into journal_entries (id, kind, reference) values ${placeholders(charges.length, "(?, 'usage', ?)")}
     on conflict (kind, reference) do nothing returning id`,
    charges.flatMap((c, i) => [entryIds[i], c.event.requestId]),
  );
  // A charge without its usage record would be corruption: fail the batch, which the consumer
  // then retries event by event (settleUsageEvent reports the culprit).
  if (inserted.length !== charges.length) throw new Error("usage charge exists for a request without a usage record");
  const legs = charges.flatMap((c, i) =>
    (
      [
        [ledgerAccounts.customer(c.accountId), -c.cost],
        [ledgerAccounts.revenue, c.platformFee],
        [ledgerAccounts.hoster(c.reservation.hoster_id as string), c.hosterEarned],
      ] as const
    )
      .filter(([, amount]) => amount !== 0n)
      .map(([account, amount]) => [newId(), entryIds[i], account, amount]),
  );
  await em.execute(
    `insert into ledger_postings (id, entry_id, ledger_account, amount_micros) values ${placeholders(legs.length, "(?, ?, ?, ?)")}`,
    legs.flat(),
  );
}

/** Charges and releases holds, one row per wallet, locked in account order. */
async function moveWallets(em: Em, charges: Charge[]): Promise<void> {
  const byAccount = new Map<string, { cost: Micros; held: Micros }>();
  for (const c of charges) {
    const totals = byAccount.get(c.accountId) ?? { cost: 0n, held: 0n };
    totals.cost += c.cost;
    totals.held += c.reserved;
    byAccount.set(c.accountId, totals);
  }
  const accounts = [...byAccount.keys()].sort();
  await em.execute(
    `select 1 from wallets where account_id in (${placeholders(accounts.length, "?")}) order by account_id for update`,
    accounts,
  );
  await em.execute(
    `update wallets w set posted_micros = w.posted_micros - v.cost, held_micros = w.held_micros - v.held
     from (values ${placeholders(accounts.length, "(?::uuid, ?::bigint, ?::bigint)")}) as v (account_id, cost, held)
     where w.account_id = v.account_id`,
    accounts.flatMap((a) => [a, byAccount.get(a)!.cost, byAccount.get(a)!.held]),
  );
}

/**
 * The usage records and their hourly rollups in one statement: the rollup is summed from the
 * rows just inserted, bucketed by the reservation's time (as insertUsageRecord does).
 */
async function insertUsageWithRollups(em: Em, charges: Charge[]): Promise<void> {
  const rows = charges.map((c) => {
    const r = c.reservation;
    return [
      c.event.requestId,
      r.id,
      c.accountId,
      r.key_id,
      r.model_id,
      r.provider,
      r.hoster_id,
      c.inputTokens,
      c.outputTokens,
      c.cost,
      c.platformFee,
      c.hosterEarned,
      c.latencyMs,
      c.event.success,
      c.event.success ? "" : c.event.errorCode,
      r.created_at,
    ];
  });
  await em.execute(
    `with inserted as (
       insert into usage_records (request_id, reservation_id, account_id, key_id, model_id, provider, hoster_id,
         input_tokens, output_tokens, cost_micros, platform_fee_micros, hoster_earned_micros, latency_ms, success,
         error_code, created_at)
       values ${placeholders(rows.length, "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::timestamptz)")}
       returning *
     )
     insert into usage_hourly ${HOURLY_COLUMNS}
     select account_id, date_trunc('hour', created_at, 'UTC'), model_id, provider, count(*), sum(input_tokens),
       sum(output_tokens), sum(cost_micros), sum(platform_fee_micros), sum(hoster_earned_micros), sum(latency_ms),
       count(*) filter (where not success)
     from inserted group by 1, 2, 3, 4
     ${HOURLY_ACCUMULATE}`,
    rows.flat(),
  );
}
