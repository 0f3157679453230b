import type { Orm } from "@mkt/runtime/db";
import type { HosterStatus } from "./hoster.entity.ts";

export interface StoredModel {
  modelId: string;
  modelAlias: string;
  contextWindow: bigint;
  /** chat | embedding */
  kind: string;
  /** The most choices (`n`) one chat request may ask for. */
  maxN: bigint;
  /** The public model it serves (its model_id unless the hoster named another). */
  canonicalId: string;
  /** How its weights are stored (`unknown` unless the hoster said). */
  quantization: string;
}

/** A hoster row with its models; the sealed token stays out of what handlers see. */
export interface StoredHoster {
  id: string;
  name: string;
  endpointUrl: string;
  status: HosterStatus;
  lastCheckedAt: Date | null;
  consecutiveFailures: number;
  /**
   * Usage reports that disagreed with the registry's count
   * (docs/adr/0023-usage-mismatches-flagged-not-punished.md).
   */
  usageMismatches: bigint;
  createdAt: Date;
  models: StoredModel[];
}

/** What routing needs of a hoster: where to call, the sealed token, its health and models. */
export interface RoutableHoster {
  id: string;
  name: string;
  endpointUrl: string;
  apiKeySealed: string;
  status: HosterStatus;
  createdAt: Date;
  models: StoredModel[];
}

/** What a health probe needs: where to call and the sealed token. */
export interface ProbeTarget {
  id: string;
  endpointUrl: string;
  apiKeySealed: string;
  modelIds: string[];
}

interface HosterRow {
  id: string;
  name: string;
  endpoint_url: string;
  status: HosterStatus;
  last_checked_at: Date | null;
  consecutive_failures: number;
  usage_mismatches: string | number | bigint;
  created_at: Date;
}

interface ModelRow {
  hoster_id: string;
  model_id: string;
  model_alias: string;
  context_window: string | number | bigint;
  kind: string;
  max_n: number;
  canonical_id: string;
  quantization: string;
}

const storedModel = (row: Omit<ModelRow, "hoster_id">): StoredModel => ({
  modelId: row.model_id,
  modelAlias: row.model_alias,
  contextWindow: BigInt(row.context_window),
  kind: row.kind,
  maxN: BigInt(row.max_n),
  canonicalId: row.canonical_id,
  quantization: row.quantization,
});

/**
 * The hosters and hoster_models tables. Reads name their columns explicitly so the sealed token
 * is only ever read by the prober, the hoster catalog and the routing table, which need it.
 */
export class HosterStore {
  readonly #orm: Orm;

  constructor(orm: Orm) {
    this.#orm = orm;
  }

  /** Inserts a hoster as `registering` (not listed, probed or routable) with its models. */
  async insertRegistering(hoster: {
    id: string;
    name: string;
    endpointUrl: string;
    apiKeySealed: string;
    models: StoredModel[];
  }): Promise<void> {
    await this.#orm.em.fork().transactional(async (em) => {
      await em.execute(
        `insert into hosters (id, name, endpoint_url, api_key_sealed, status, consecutive_failures)
         values (?, ?, ?, ?, 'registering', 0)`,
        [hoster.id, hoster.name, hoster.endpointUrl, hoster.apiKeySealed],
      );
      for (const m of hoster.models) {
        await em.execute(
          `insert into hoster_models (hoster_id, model_id, model_alias, context_window, kind, max_n, canonical_id,
             quantization)
           values (?, ?, ?, ?, ?, ?, ?, ?)`,
          [
            hoster.id,
            m.modelId,
            m.modelAlias,
            m.contextWindow.toString(),
            m.kind,
            Number(m.maxN),
            m.canonicalId,
            m.quantization,
          ],
        );
      }
    });
  }

  /** Removes a hoster whose registration did not complete (its models go with it). */
  async deleteRegistering(id: string): Promise<void> {
    await this.#orm.em.fork().execute(`delete from hosters where id = ? and status = 'registering'`, [id]);
  }

  /** Registration completed: the server just passed every check. */
  async markRegistered(id: string, checkedAt: Date): Promise<void> {
    await this.#orm.em.fork().execute(
      `update hosters set status = 'healthy', last_checked_at = ?, last_error = null, consecutive_failures = 0
         where id = ? and status = 'registering'`,
      [checkedAt, id],
    );
  }

  async get(id: string): Promise<StoredHoster | undefined> {
    const rows = await this.#select(`where hosters.id = ? and hosters.status <> 'registering'`, [id]);
    return rows[0];
  }

  /** Every registered hoster, oldest first. */
  list(): Promise<StoredHoster[]> {
    return this.#select(`where hosters.status <> 'registering'`, []);
  }

  /**
   * One registered hoster as routing needs it: status, endpoint, sealed token and models;
   * undefined when there is no such hoster or it is still registering.
   */
  async routable(id: string): Promise<RoutableHoster | undefined> {
    const where = `where hosters.id = ? and hosters.status <> 'registering'`;
    const rows = (await this.#orm.em
      .fork()
      .execute(`select id, name, endpoint_url, api_key_sealed, status, created_at from hosters ${where}`, [
        id,
      ])) as Array<HosterRow & { api_key_sealed: string }>;
    const row = rows[0];
    if (!row) return undefined;
    const models = await this.#models(where, [id]);
    return {
      id: row.id,
      name: row.name,
      endpointUrl: row.endpoint_url,
      apiKeySealed: row.api_key_sealed,
      status: row.status,
      createdAt: new Date(row.created_at),
      models: models.get(row.id) ?? [],
    };
  }

  /**
   * Every registered hoster as routing needs it, oldest first, in one query (models aggregated
   * per hoster): the routing table is rebuilt on every catalog change, so its cost must not grow
   * with one round trip per hoster.
   */
  async allRoutable(): Promise<RoutableHoster[]> {
    const rows = (await this.#orm.em.fork().execute(
      `select h.id, h.name, h.endpoint_url, h.api_key_sealed, h.status, h.created_at,
              coalesce(json_agg(json_build_object('model_id', m.model_id, 'model_alias', m.model_alias,
                                                  'context_window', m.context_window::text,
                                                  'kind', m.kind, 'max_n', m.max_n,
                                                  'canonical_id', m.canonical_id,
                                                  'quantization', m.quantization)
                                order by m.model_id) filter (where m.model_id is not null), '[]') as models
       from hosters h left join hoster_models m on m.hoster_id = h.id
       where h.status <> 'registering'
       group by h.id
       order by h.created_at, h.id`,
    )) as Array<HosterRow & { api_key_sealed: string; models: Array<Omit<ModelRow, "hoster_id">> }>;
    return rows.map((row) => ({
      id: row.id,
      name: row.name,
      endpointUrl: row.endpoint_url,
      apiKeySealed: row.api_key_sealed,
      status: row.status,
      createdAt: new Date(row.created_at),
      models: row.models.map(storedModel),
    }));
  }

  /** The hosters the prober checks: every registered one. */
  async probeTargets(): Promise<ProbeTarget[]> {
    const em = this.#orm.em.fork();
    const hosters = (await em.execute(
      `select id, endpoint_url, api_key_sealed from hosters where status <> 'registering' order by created_at`,
    )) as Array<{ id: string; endpoint_url: string; api_key_sealed: string }>;
    const models = await this.#models(`where hosters.status <> 'registering'`, []);
    return hosters.map((h) => ({
      id: h.id,
      endpointUrl: h.endpoint_url,
      apiKeySealed: h.api_key_sealed,
      modelIds: (models.get(h.id) ?? []).map((m) => m.modelId),
    }));
  }

  /**
   * Records one probe in a single UPDATE: a success makes the hoster healthy and resets the
   * count; a failure counts, and makes it unhealthy at `unhealthyAfter` failures in a row. Being
   * one statement on current values, concurrent probes from several replicas stay consistent.
   * Returns true when the status flipped (the row's old status is read under the same row lock),
   * so only a real transition is announced to the edges.
   */
  async recordProbe(id: string, at: Date, error: string | undefined, unhealthyAfter: number): Promise<boolean> {
    const set =
      error === undefined
        ? `status = 'healthy', last_checked_at = ?, last_error = null, consecutive_failures = 0`
        : `last_checked_at = ?, last_error = ?, consecutive_failures = h.consecutive_failures + 1,
           status = case when h.consecutive_failures + 1 >= ? then 'unhealthy' else h.status end`;
    const params = error === undefined ? [at, id] : [at, error, unhealthyAfter, id];
    const rows = await this.#orm.em.fork().execute<{ before: string; after: string }[]>(
      `update hosters h set ${set}
         from (select id, status from hosters where id = ? and status <> 'registering' for update) old
        where h.id = old.id
        returning old.status as before, h.status as after`,
      params,
    );
    return rows.some((r) => r.before !== r.after);
  }

  /**
   * Sets a registered hoster's model's public name and quantization (an undefined one keeps its
   * value). Undefined when the hoster has no such model.
   */
  async updateModel(
    hosterId: string,
    modelId: string,
    change: { canonicalId?: string; quantization?: string },
  ): Promise<StoredModel | undefined> {
    const [row] = (await this.#orm.em.fork().execute(
      `update hoster_models m set canonical_id = coalesce(?, m.canonical_id), quantization = coalesce(?, m.quantization)
         from hosters h
        where h.id = m.hoster_id and h.status <> 'registering' and m.hoster_id = ? and m.model_id = ?
        returning m.model_id, m.model_alias, m.context_window, m.kind, m.max_n, m.canonical_id, m.quantization`,
      [change.canonicalId ?? null, change.quantization ?? null, hosterId, modelId],
    )) as ModelRow[];
    return row ? storedModel(row) : undefined;
  }

  /**
   * Adds to hosters' usage_mismatches, all of them in one statement on the current values (so
   * replicas add up). Ids that are not registered hosters are ignored. With `em`, inside that
   * transaction.
   */
  async addUsageMismatches(counts: ReadonlyMap<string, number>, em: Orm["em"] = this.#orm.em.fork()): Promise<void> {
    if (counts.size === 0) return;
    const rows = [...counts].map(([id, n]) => ({ id, n }));
    await em.execute(
      `update hosters h set usage_mismatches = h.usage_mismatches + c.n
         from jsonb_to_recordset(?::jsonb) as c(id uuid, n bigint)
        where h.id = c.id`,
      [JSON.stringify(rows)],
    );
  }

  async #select(where: string, params: unknown[]): Promise<StoredHoster[]> {
    const em = this.#orm.em.fork();
    const rows = (await em.execute(
      `select id, name, endpoint_url, status, last_checked_at, consecutive_failures, usage_mismatches, created_at
       from hosters ${where} order by created_at, id`,
      params,
    )) as HosterRow[];
    const models = await this.#models(where, params);
    return rows.map((r) => ({
      id: r.id,
      name: r.name,
      endpointUrl: r.endpoint_url,
      status: r.status,
      lastCheckedAt: r.last_checked_at ? new Date(r.last_checked_at) : null,
      consecutiveFailures: Number(r.consecutive_failures),
      usageMismatches: BigInt(r.usage_mismatches),
      createdAt: new Date(r.created_at),
      models: models.get(r.id) ?? [],
    }));
  }

  /** The models of the hosters `where` (written on the hosters table) selects. */
  async #models(where: string, params: unknown[]): Promise<Map<string, StoredModel[]>> {
    const rows = (await this.#orm.em.fork().execute(
      `select m.hoster_id, m.model_id, m.model_alias, m.context_window, m.kind, m.max_n, m.canonical_id,
              m.quantization
       from hoster_models m join hosters on hosters.id = m.hoster_id ${where}
       order by m.hoster_id, m.model_id`,
      params,
    )) as ModelRow[];
    const byHoster = new Map<string, StoredModel[]>();
    for (const row of rows) {
      const list = byHoster.get(row.hoster_id) ?? [];
      list.push(storedModel(row));
      byHoster.set(row.hoster_id, list);
    }
    return byHoster;
  }
}
