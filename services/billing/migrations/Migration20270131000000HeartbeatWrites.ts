import { Migration } from "@mikro-orm/migrations";

/**
 * What a heartbeat costs PostgreSQL per lease it applies (docs/adr/0016-settlement-write-cost.md).
 *
 * `leases_account_idx` loses `last_used_at`: a heartbeat sets it on every lease that admitted
 * anything, and an update that changes an indexed column cannot be HOT, so every such update
 * added an entry to each of the table's four indexes despite the room `fillfactor = 70` keeps on
 * its pages. The index still finds an account's leases; the sizing read's "used in the last
 * 2 TTL" is a filter over them.
 *
 * `wallets`, `lease_allowances` and `rate_counters` keep a fifth of each page free: every
 * heartbeat updates each account's wallet (its hold), each allowance it applies or grows and the
 * account's window counters, none of them in an indexed column, so with room on the page the new
 * version stays there (a HOT update) instead of adding index entries. Existing pages get the room
 * as they are rewritten (vacuum full, or new rows): the setting applies to pages filled from now.
 *
 * `hold_edge_incarnation` and `lock_edge_incarnation` guard an edge's incarnation with an
 * advisory lock instead of a row lock on its `edge_sessions` row: every lease call of an edge
 * took `FOR KEY SHARE` on that row, a write of the row's header (and a WAL record) per call, and
 * a MultiXact whenever two of them overlapped (a heartbeat's parallel transactions always do).
 * A call holds the edge's lock shared (lease calls run side by side) and reads the incarnation in
 * a statement that starts once the lock is granted: a VOLATILE function takes a fresh snapshot
 * for each statement, so a new incarnation committed while the call waited is seen, as the row
 * lock's re-read saw it. Starting an incarnation takes it exclusively: it waits for the calls in
 * flight to commit, and the calls after it see the new incarnation (and are refused).
 */
export class Migration20270131000000HeartbeatWrites extends Migration {
  override async up(): Promise<void> {
    this.addSql(`drop index leases_account_idx`);
    this.addSql(`create index leases_account_idx on leases (account_id)`);
    this.addSql(`alter table wallets set (fillfactor = 80)`);
    this.addSql(`alter table lease_allowances set (fillfactor = 80)`);
    this.addSql(`alter table rate_counters set (fillfactor = 80)`);
    // 0x65646765 ("edge"): the first key of the two-key advisory lock space, for edge incarnations.
    this.addSql(`
      create function hold_edge_incarnation(edge text, wanted bigint, boot text) returns boolean
      language plpgsql volatile as $$
      begin
        perform pg_advisory_xact_lock_shared(1701079909, hashtext(edge));
        return exists (select 1 from edge_sessions s
          where s.edge_id = edge and s.incarnation = wanted and s.boot_id = boot);
      end $$`);
    this.addSql(`
      create function lock_edge_incarnation(edge text) returns void
      language sql volatile as $$ select pg_advisory_xact_lock(1701079909, hashtext(edge)) $$`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop function lock_edge_incarnation(text)`);
    this.addSql(`drop function hold_edge_incarnation(text, bigint, text)`);
    this.addSql(`alter table rate_counters reset (fillfactor)`);
    this.addSql(`alter table lease_allowances reset (fillfactor)`);
    this.addSql(`alter table wallets reset (fillfactor)`);
    this.addSql(`drop index leases_account_idx`);
    this.addSql(`create index leases_account_idx on leases (account_id, last_used_at)`);
  }
}
