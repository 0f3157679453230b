import { Migration } from "@mikro-orm/migrations";

/**
 * Hoster logins, their single-use invite codes, and sessions (customer or hoster). Codes and
 * session tokens are stored as SHA-256 hashes only. Per-IP counters become one table for every
 * purpose (sign-ups, failed invite codes, failed logins); the old sign-up windows are hourly and
 * disposable, so they are dropped rather than copied.
 */
export class Migration20261123120000HostersAndSessions extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table invites (
        id uuid primary key,
        code_hash text not null unique,
        created_at timestamptz not null default now(),
        consumed_at timestamptz,
        hoster_id uuid
      )`);

    this.addSql(`
      create table hoster_logins (
        hoster_id uuid primary key,
        email text not null,
        email_normalized text not null unique,
        password_hash text not null,
        created_at timestamptz not null default now()
      )`);

    this.addSql(`
      create table sessions (
        id uuid primary key,
        token_hash text not null unique,
        kind text not null check (kind in ('customer', 'hoster')),
        subject_id uuid not null,
        email text not null,
        created_at timestamptz not null default now(),
        expires_at timestamptz not null,
        ended_at timestamptz
      )`);
    // Pruning of sessions long expired.
    this.addSql(`create index sessions_expires_idx on sessions (expires_at)`);

    this.addSql(`drop table signup_attempts`);
    this.addSql(`
      create table ip_attempts (
        purpose text not null,
        client_ip text not null,
        window_start timestamptz not null,
        attempts integer not null default 0,
        primary key (purpose, client_ip, window_start)
      )`);
    this.addSql(`create index ip_attempts_window_idx on ip_attempts (window_start)`);
  }
}
