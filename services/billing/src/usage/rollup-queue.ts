import { sqlArray, type Cte } from "../batch-statement.ts";

/** A rollup table as the queue carries it: its key columns, then the columns its deltas add to. */
export interface Rollup {
  table: string;
  /** The queue's column holding this rollup's deltas, an array of `type`. */
  queued: string;
  /** The composite type of one delta: the key columns, then the sums, in this order. */
  type: string;
  keys: Array<[name: string, type: string]>;
  sums: string[];
}

/** Hourly usage per account, model, provider and subscription (usage reports). */
export const HOURLY: Rollup = {
  table: "usage_hourly",
  queued: "hourly",
  type: "usage_hourly_delta",
  keys: [
    ["account_id", "uuid"],
    ["hour", "timestamptz"],
    ["model_id", "text"],
    ["provider", "text"],
    ["subscription_id", "text"],
  ],
  sums: [
    "requests",
    "input_tokens",
    "output_tokens",
    "cost_micros",
    "platform_fee_micros",
    "hoster_earned_micros",
    "latency_ms_sum",
    "failed",
    "cached_input_tokens",
  ],
};

/** Hosters' usage per UTC day, key and model (earnings and subscriber reports). */
export const HOSTER_DAILY: Rollup = {
  table: "hoster_usage_daily",
  queued: "hoster_daily",
  type: "hoster_daily_delta",
  keys: [
    ["hoster_id", "text"],
    ["day", "date"],
    ["key_id", "text"],
    ["model_id", "text"],
  ],
  sums: ["requests", "input_tokens", "output_tokens", "cost_micros", "hoster_earned_micros"],
};

/** Daily spend of keys without a spend limit (a limited key's is written by settlement itself). */
export const KEY_SPEND: Rollup = {
  table: "key_daily_spend",
  queued: "key_spend",
  type: "key_spend_delta",
  keys: [
    ["key_id", "uuid"],
    ["day", "date"],
  ],
  sums: ["spent_micros"],
};

export const ROLLUPS = [HOURLY, HOSTER_DAILY, KEY_SPEND] as const;

/** A usage record's contribution to each rollup row, by key: the select lists of the deltas below. */
const HOURLY_DELTAS = `select account_id, date_trunc('hour', created_at, 'UTC') as hour, model_id, provider,
    subscription_id, count(*) as requests, sum(input_tokens) as input_tokens, sum(output_tokens) as output_tokens,
    sum(cost_micros) as cost_micros, sum(platform_fee_micros) as platform_fee_micros,
    sum(hoster_earned_micros) as hoster_earned_micros, sum(latency_ms) as latency_ms_sum,
    count(*) filter (where not success) as failed, sum(cached_input_tokens) as cached_input_tokens`;
const HOSTER_DAILY_DELTAS = `select hoster_id, (created_at at time zone 'UTC')::date as day, key_id, model_id,
    count(*) as requests, sum(input_tokens) as input_tokens, sum(output_tokens) as output_tokens,
    sum(cost_micros) as cost_micros, sum(hoster_earned_micros) as hoster_earned_micros`;

/**
 * What a set of usage records adds to the hourly and hosters' daily rollups, one row per rollup
 * row (`records` a table or CTE of usage records): what the queue carries per batch, and what the
 * reconciliation compares the rollups with over all records.
 */
export const hourlyDeltas = (records: string) => `${HOURLY_DELTAS} from ${records} group by 1, 2, 3, 4, 5`;
export const hosterDailyDeltas = (records: string) =>
  `${HOSTER_DAILY_DELTAS} from ${records} where provider = 'hoster' group by 1, 2, 3, 4`;

/** Spend added to a key without a limit on a UTC day (`day` as YYYY-MM-DD). */
export interface KeySpendDelta {
  keyId: string;
  day: string;
  micros: bigint;
}

/**
 * The CTE queueing a settled batch's rollup deltas (one row, docs/settlement.md): the hourly and
 * hosters' daily deltas summed in SQL from `records`, the CTE returning the usage records the
 * statement inserted, so a request recorded already adds nothing; and the spend of keys without a
 * limit, summed in memory. A batch that inserted no record and spent nothing queues no row.
 */
export function rollupQueueCte(records: string, keySpend: readonly KeySpendDelta[]): Cte {
  // Arrays of composite values: PostgreSQL stores and unnests them as they are, where jsonb cost
  // about five times as much CPU to build and read back (bench/README.md).
  const deltas = (rollup: Rollup, select: string) =>
    `coalesce((select array_agg(d::${rollup.type}) from (${select}) d), '{}')`;
  return {
    name: "rollup_queued",
    sql: `insert into usage_rollup_queue (hourly, hoster_daily, key_spend)
      select ${deltas(HOURLY, hourlyDeltas(records))}, ${deltas(HOSTER_DAILY, hosterDailyDeltas(records))},
        ${deltas(KEY_SPEND, "select * from unnest(?::uuid[], ?::date[], ?::bigint[])")}
      where exists (select 1 from ${records}) or cardinality(?::uuid[]) > 0`,
    params: [
      sqlArray(keySpend.map((s) => s.keyId)),
      sqlArray(keySpend.map((s) => s.day)),
      sqlArray(keySpend.map((s) => s.micros)),
      sqlArray(keySpend.map((s) => s.keyId)),
    ],
  };
}

/**
 * The reconciliation's check of one rollup (wallets/reconciliation.ts): every row where the
 * rollup plus its deltas not yet folded differs from `expected`, the same rollup computed over
 * all usage records (hourlyDeltas, hosterDailyDeltas). Settlement inserts the records and queues
 * their deltas in one statement, and a fold moves deltas from the queue to the rollup in one, so
 * the two agree in every snapshot, folded or not.
 */
export function rollupMismatchSql(check: string, rollup: Rollup, expected: string): string {
  const keys = rollup.keys.map(([name]) => name);
  const columns = [...keys, ...rollup.sums].join(", ");
  const sums = (alias: string) => `row(${rollup.sums.map((s) => `${alias}.${s}`).join(", ")})`;
  return `select '${check}' as check,
      concat_ws(' ', ${keys.map((k) => `coalesce(x.${k}, a.${k})::text`).join(", ")}) as subject,
      ${sums("x")}::text as expected, ${sums("a")}::text as actual
    from (${expected}) x
    full join (
      select ${keys.join(", ")}, ${rollup.sums.map((s) => `sum(${s}) as ${s}`).join(", ")} from (
        select ${columns} from ${rollup.table}
        union all
        select ${columns} from usage_rollup_queue q, unnest(q.${rollup.queued}) as d
      ) u group by ${keys.map((_, i) => i + 1).join(", ")}
    ) a on ${keys.map((k) => `a.${k} = x.${k}`).join(" and ")}
    where ${sums("x")} is distinct from ${sums("a")}`;
}
