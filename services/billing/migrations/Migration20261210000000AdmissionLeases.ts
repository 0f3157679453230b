import { Migration } from "@mikro-orm/migrations";

/**
 * Admission leases (docs/adr/0007-admission-leases.md).
 *
 * `edge_sessions` is one row per edge process, updated once per heartbeat: its `deadline`
 * (billing's clock) is the deadline of every open lease of the edge, so a heartbeat extends them
 * all with one row write.
 *
 * `leases` is one row per (edge, account) grant; at most one is open per pair. A fenced lease
 * has its own frozen `deadline`. `held_micros` is what the wallet holds for the lease
 * (granted − settled while open or fenced, admitted − settled once closed, 0 once released), kept
 * in the same transactions as `wallets.held_micros`, so conservation is a sum.
 *
 * `lease_allowances` are the lease's cumulative totals, one row per resource and window (credit
 * has no window); `scope` is '' for the account and a subscription id for a nested budget.
 */
export class Migration20261210000000AdmissionLeases extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table edge_sessions (
        edge_id text primary key,
        sequence bigint not null default 0,
        deadline timestamptz not null,
        created_at timestamptz not null default now()
      )`);
    this.addSql(`
      create table leases (
        id uuid primary key,
        edge_id text not null references edge_sessions (edge_id),
        account_id uuid not null,
        -- The account's tier when the lease was granted: its limits size the lease's growth.
        tier text not null,
        status text not null check (status in ('open', 'fenced', 'closed')),
        applied_sequence bigint not null default 0,
        deadline timestamptz,
        held_micros bigint not null default 0 check (held_micros >= 0),
        settled_micros bigint not null default 0 check (settled_micros >= 0),
        last_used_at timestamptz not null,
        closed_at timestamptz,
        release_at timestamptz,
        released_at timestamptz,
        created_at timestamptz not null,
        check ((status = 'open') = (deadline is null)),
        check ((status = 'closed') = (closed_at is not null))
      )`);
    this.addSql(`create unique index leases_one_open_idx on leases (edge_id, account_id) where status = 'open'`);
    this.addSql(`create index leases_account_idx on leases (account_id, last_used_at)`);
    this.addSql(`create index leases_unreleased_idx on leases (edge_id) where released_at is null`);
    this.addSql(`
      create table lease_allowances (
        id uuid primary key,
        lease_id uuid not null references leases (id),
        scope text not null default '',
        resource text not null,
        window_start timestamptz,
        window_end timestamptz,
        granted bigint not null check (granted >= 0),
        admitted bigint not null default 0 check (admitted >= 0 and admitted <= granted),
        unique nulls not distinct (lease_id, scope, resource, window_start)
      )`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table lease_allowances`);
    this.addSql(`drop table leases`);
    this.addSql(`drop table edge_sessions`);
  }
}
