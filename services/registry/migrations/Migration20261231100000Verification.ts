import { Migration } from "@mikro-orm/migrations";

/**
 * Verification of open endpoints (docs/verification.md): a row per run with its checks, and on
 * each hoster model its current verdict. `degraded` after two failed runs in a row, `verified`
 * after a passing one; `unverified` until the first run.
 */
export class Migration20261231100000Verification extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create table verification_runs (
         id uuid primary key,
         hoster_id uuid not null references hosters (id) on delete cascade,
         model_id text not null,
         ran_at timestamptz not null,
         passed boolean not null,
         checks jsonb not null
       )`,
    );
    this.addSql(`create index verification_runs_endpoint_idx on verification_runs (hoster_id, model_id, ran_at desc)`);
    this.addSql(
      `alter table hoster_models
         add column verification_status text not null default 'unverified'
           check (verification_status in ('unverified', 'verified', 'degraded')),
         add column verification_failures integer not null default 0,
         add column verification_ran_at timestamptz,
         add column verification_checks jsonb not null default '[]'`,
    );
  }
}
