import { Migration } from "@mikro-orm/migrations";

/**
 * Registry's first tables: hosters and the models their servers serve. The hoster's bearer token
 * is stored only sealed by the SecretBox (AES-256-GCM with SECRETS_KEY, bound to the hoster's
 * id), never in clear. A hoster is `registering` (not listed, not probed, not routable) until
 * accounts has created its login; then `healthy` or `unhealthy` as probes find it.
 */
export class Migration20261125000000Hosters extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table hosters (
        id uuid primary key,
        name text not null,
        endpoint_url text not null,
        api_key_sealed text not null,
        status text not null check (status in ('registering', 'healthy', 'unhealthy')),
        last_checked_at timestamptz,
        last_error text,
        consecutive_failures integer not null default 0,
        created_at timestamptz not null default now()
      )`);
    // Lists and the prober read hosters by status, oldest first.
    this.addSql(`create index hosters_status_idx on hosters (status, created_at)`);

    this.addSql(`
      create table hoster_models (
        hoster_id uuid not null references hosters (id) on delete cascade,
        model_id text not null,
        model_alias text not null,
        context_window bigint not null check (context_window > 0),
        primary key (hoster_id, model_id)
      )`);
  }
}
