import { Migration } from "@mikro-orm/migrations";

/**
 * Accounts' initial schema. Unique keys carry the rules: one account per normalized e-mail
 * (concurrent sign-ups race on it, exactly one wins) and one key per secret hash (Authenticate
 * looks keys up by it). Secrets are never stored: passwords as scrypt hashes, keys as SHA-256.
 */
export class Migration20261123000000Initial extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table accounts (
        id uuid primary key,
        email text not null,
        email_normalized text not null unique,
        password_hash text not null,
        tier text not null,
        created_at timestamptz not null default now()
      )`);

    this.addSql(`
      create table api_keys (
        id uuid primary key,
        account_id uuid not null references accounts (id),
        name text not null,
        prefix text not null,
        key_hash text not null unique,
        created_at timestamptz not null default now(),
        revoked_at timestamptz,
        subscription_id text,
        product_id text,
        hoster_id text
      )`);
    // Lists (oldest first) and the active-key count per account.
    this.addSql(`create index api_keys_account_idx on api_keys (account_id, created_at)`);

    this.addSql(`
      create table signup_attempts (
        client_ip text not null,
        window_start timestamptz not null,
        attempts integer not null default 0,
        primary key (client_ip, window_start)
      )`);
    // Pruning drops past windows of every IP.
    this.addSql(`create index signup_attempts_window_idx on signup_attempts (window_start)`);
  }
}
