import { randomUUID } from "node:crypto";
import type { Orm } from "@mkt/runtime/db";
import type { Verification, VerificationCheck } from "@mkt/proto/registry/v1/registry";

/** Failed runs in a row that make an endpoint degraded. */
export const FAILED_RUNS_TO_DEGRADE = 2;

/** A hoster model on an active open plan: what verification probes. */
export interface VerifyTarget {
  hosterId: string;
  endpointUrl: string;
  apiKeySealed: string;
  modelId: string;
}

/** The verification tables (docs/verification.md): runs, and each hoster model's verdict. */
export class VerificationStore {
  readonly #orm: Orm;

  constructor(orm: Orm) {
    this.#orm = orm;
  }

  /** Every registered hoster's models that an active open plan sells, oldest hoster first. */
  async targets(): Promise<VerifyTarget[]> {
    const rows = (await this.#orm.em.fork().execute(
      `select h.id, h.endpoint_url, h.api_key_sealed, m.model_id
         from hosters h join hoster_models m on m.hoster_id = h.id
        where h.status <> 'registering'
          and exists (select 1 from products p where p.hoster_id = h.id and p.status = 'active' and p.open)
        order by h.created_at, h.id, m.model_id`,
    )) as Array<{ id: string; endpoint_url: string; api_key_sealed: string; model_id: string }>;
    return rows.map((r) => ({
      hosterId: r.id,
      endpointUrl: r.endpoint_url,
      apiKeySealed: r.api_key_sealed,
      modelId: r.model_id,
    }));
  }

  /**
   * Records a run and the model's new verdict in one transaction: a pass makes it verified and
   * resets the count; a failure counts, and makes it degraded at FAILED_RUNS_TO_DEGRADE in a row
   * (before that it keeps its verdict). Returns the verdict's status.
   */
  async record(target: VerifyTarget, at: Date, passed: boolean, checks: VerificationCheck[]): Promise<string> {
    return this.#orm.em.fork().transactional(async (em) => {
      await em.execute(
        `insert into verification_runs (id, hoster_id, model_id, ran_at, passed, checks) values (?, ?, ?, ?, ?, ?::jsonb)`,
        [randomUUID(), target.hosterId, target.modelId, at, passed, JSON.stringify(checks)],
      );
      const [row] = (await em.execute(
        `update hoster_models set
           verification_failures = case when ? then 0 else verification_failures + 1 end,
           verification_status = case
             when ? then 'verified'
             when verification_failures + 1 >= ? then 'degraded'
             else verification_status end,
           verification_ran_at = ?,
           verification_checks = ?::jsonb
         where hoster_id = ? and model_id = ?
         returning verification_status`,
        [passed, passed, FAILED_RUNS_TO_DEGRADE, at, JSON.stringify(checks), target.hosterId, target.modelId],
      )) as Array<{ verification_status: string }>;
      return row?.verification_status ?? "unverified";
    });
  }

  /**
   * Every hoster model's verdict (or, with `hosterId`, that hoster's), keyed `hosterId/modelId`
   * (models never run: absent).
   */
  async verdicts(hosterId?: string): Promise<Map<string, Verification>> {
    const rows = (await this.#orm.em.fork().execute(
      `select hoster_id, model_id, verification_status, verification_ran_at, verification_checks
         from hoster_models where verification_ran_at is not null and (?::uuid is null or hoster_id = ?::uuid)`,
      [hosterId ?? null, hosterId ?? null],
    )) as Array<{
      hoster_id: string;
      model_id: string;
      verification_status: string;
      verification_ran_at: Date;
      verification_checks: VerificationCheck[];
    }>;
    return new Map(
      rows.map((r) => [
        `${r.hoster_id}/${r.model_id}`,
        {
          status: r.verification_status,
          lastRunAt: new Date(r.verification_ran_at).toISOString(),
          checks: r.verification_checks,
        },
      ]),
    );
  }
}
