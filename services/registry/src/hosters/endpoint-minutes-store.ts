import type { Orm } from "@mkt/runtime/db";
import { HourUptime, type EndpointStats } from "@mkt/proto/registry/v1/registry";
import { figuresOf, type EndpointMinute } from "./endpoint-figures.ts";

const THIRTY_MINUTES_MS = 30 * 60_000;
const ONE_DAY_MS = 24 * 60 * 60_000;
const ONE_HOUR_MS = 60 * 60_000;

/** The 24 hours ending with the one holding `now`, each endpoint's counts filled in where it has them. */
function hourSeries(now: Date, counts: ReadonlyMap<number, { successes: number; faults: number }>): HourUptime[] {
  const current = Math.floor(now.getTime() / ONE_HOUR_MS);
  return Array.from({ length: 24 }, (_, i) => {
    const hour = current - 23 + i;
    const { successes, faults } = counts.get(hour) ?? { successes: 0, faults: 0 };
    return HourUptime.fromPartial({
      hourStart: new Date(hour * ONE_HOUR_MS).toISOString(),
      successes: BigInt(successes),
      faults: BigInt(faults),
      uptime: successes + faults > 0 ? successes / (successes + faults) : undefined,
    });
  });
}

/** A window's figures from its sums as the stats query names them (`requests_30m`, ...). */
function windowOf(row: Record<string, unknown>, window: string) {
  const count = (name: string) => Number(row[`${name}_${window}`] ?? 0);
  const hist = (name: string) => (row[`${name}_${window}`] as number[] | null) ?? [];
  return figuresOf({
    requests: count("requests"),
    successes: count("successes"),
    faults: count("faults"),
    upstream429s: count("upstream_429s"),
    latencyHist: hist("latency_hist"),
    ttftHist: hist("ttft_hist"),
    tpsHist: hist("tps_hist"),
  });
}

/** The window sums of one column set, `filter` choosing the window's minutes. */
const sums = (suffix: string, filter: string) =>
  ["requests", "successes", "faults", "upstream_429s"]
    .map((c) => `sum(${c}) filter (where ${filter}) as ${c}_${suffix}`)
    .concat(
      ["latency_hist", "ttft_hist", "tps_hist"].map(
        (c) => `int_array_sum(${c}) filter (where ${filter}) as ${c}_${suffix}`,
      ),
    )
    .join(", ");

/**
 * The endpoint_minutes table: each endpoint's live figures by the minute
 * (endpoint-figures.ts). Rows older than a day are no longer read; `prune` removes them.
 */
export class EndpointMinutesStore {
  readonly #orm: Orm;

  constructor(orm: Orm) {
    this.#orm = orm;
  }

  /**
   * Adds a batch's minutes to the stored ones, all in one statement (replicas add up). Minutes
   * of ids that are not registered hosters are dropped. With `em`, inside that transaction.
   */
  async add(minutes: readonly EndpointMinute[], em: Orm["em"] = this.#orm.em.fork()): Promise<void> {
    if (minutes.length === 0) return;
    const rows = minutes.map((m) => ({
      hoster_id: m.hosterId,
      model_id: m.modelId,
      minute: m.minute.toISOString(),
      requests: m.requests,
      successes: m.successes,
      faults: m.faults,
      upstream_429s: m.upstream429s,
      latency_hist: m.latencyHist,
      ttft_hist: m.ttftHist,
      tps_hist: m.tpsHist,
    }));
    await em.execute(
      `insert into endpoint_minutes as e (hoster_id, model_id, minute, requests, successes, faults, upstream_429s,
         latency_hist, ttft_hist, tps_hist)
       select r.* from jsonb_to_recordset(?::jsonb) as r(hoster_id uuid, model_id text, minute timestamptz,
           requests integer, successes integer, faults integer, upstream_429s integer, latency_hist integer[],
           ttft_hist integer[], tps_hist integer[])
         where exists (select 1 from hosters h where h.id = r.hoster_id)
       order by 1, 2, 3
       on conflict (hoster_id, model_id, minute) do update set
         requests = e.requests + excluded.requests,
         successes = e.successes + excluded.successes,
         faults = e.faults + excluded.faults,
         upstream_429s = e.upstream_429s + excluded.upstream_429s,
         latency_hist = int_array_add(e.latency_hist, excluded.latency_hist),
         ttft_hist = int_array_add(e.ttft_hist, excluded.ttft_hist),
         tps_hist = int_array_add(e.tps_hist, excluded.tps_hist)`,
      [JSON.stringify(rows)],
    );
  }

  /**
   * Every endpoint's figures (or, with `hosterId`, that hoster's) over the 30 minutes and the day
   * before `now` (the hosters' clock), keyed `hosterId/modelId`. One statement: the day's minutes,
   * summed per window. With `hours`, each one's uptime hour by hour too (a second statement).
   */
  async stats(now: Date, hosterId?: string, options: { hours?: boolean } = {}): Promise<Map<string, EndpointStats>> {
    const dayStart = new Date(now.getTime() - ONE_DAY_MS);
    const recentStart = new Date(now.getTime() - THIRTY_MINUTES_MS);
    const rows = (await this.#orm.em.fork().execute(
      `select hoster_id, model_id, ${sums("30m", "minute >= ?")}, ${sums("1d", "true")}
         from endpoint_minutes
        where minute >= ? and minute <= ? and (?::uuid is null or hoster_id = ?::uuid)
        group by hoster_id, model_id`,
      [...Array.from({ length: 7 }, () => recentStart), dayStart, now, hosterId ?? null, hosterId ?? null],
    )) as Array<Record<string, unknown>>;
    const hours = options.hours ? await this.#hours(now, hosterId) : undefined;
    const stats = new Map<string, EndpointStats>();
    for (const row of rows) {
      const key = `${String(row.hoster_id)}/${String(row.model_id)}`;
      stats.set(key, {
        last30m: windowOf(row, "30m"),
        last1d: windowOf(row, "1d"),
        hours: hours ? hourSeries(now, hours.get(key) ?? new Map()) : [],
      });
    }
    return stats;
  }

  /** Successes and faults per endpoint and hour (hours since the epoch) over the last 24 hours. */
  async #hours(now: Date, hosterId?: string) {
    const start = new Date((Math.floor(now.getTime() / ONE_HOUR_MS) - 23) * ONE_HOUR_MS);
    const rows = (await this.#orm.em.fork().execute(
      `select hoster_id, model_id, floor(extract(epoch from minute) / 3600)::int as hour,
              sum(successes)::int as successes, sum(faults)::int as faults
         from endpoint_minutes
        where minute >= ? and minute <= ? and (?::uuid is null or hoster_id = ?::uuid)
        group by 1, 2, 3`,
      [start, now, hosterId ?? null, hosterId ?? null],
    )) as Array<{ hoster_id: string; model_id: string; hour: number; successes: number; faults: number }>;
    const byEndpoint = new Map<string, Map<number, { successes: number; faults: number }>>();
    for (const r of rows) {
      const key = `${r.hoster_id}/${r.model_id}`;
      const hours = byEndpoint.get(key) ?? new Map();
      hours.set(r.hour, { successes: r.successes, faults: r.faults });
      byEndpoint.set(key, hours);
    }
    return byEndpoint;
  }

  /** Removes minutes older than a day before `now`. */
  async prune(now: Date): Promise<void> {
    await this.#orm.em
      .fork()
      .execute(`delete from endpoint_minutes where minute < ?`, [new Date(now.getTime() - ONE_DAY_MS)]);
  }
}
