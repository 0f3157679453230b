import pg from "pg";
import { randomBytes } from "node:crypto";
import { createLogger } from "@mkt/runtime/logger";
import { connectNats, eventNames } from "@mkt/runtime/nats";
import { freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { allowedCallerClient, testCertificates } from "@mkt/testkit/test-certificates";
import { AccountsServiceClient } from "@mkt/proto/accounts/v1/accounts";
import { loadAccountsConfig } from "../src/config.ts";
import { startAccounts, type AccountsOptions } from "../src/server.ts";
import { ACCOUNTS_CALLERS } from "../src/accounts-callers.ts";

/**
 * A real accounts process for one test file: its own database and NATS prefix, a real gRPC
 * client, a NATS connection for watching events and a direct SQL connection for checking what
 * was stored.
 */
export async function startTestAccounts(env: Record<string, string> = {}, options: AccountsOptions = {}) {
  const prefix = freshEventsPrefix();
  const certs = await testCertificates();
  const config = loadAccountsConfig({
    ...certs.env("accounts"),
    DATABASE_URL: await freshDatabaseUrl(),
    NATS_URL: TEST_NATS_URL,
    EVENTS_PREFIX: prefix,
    GRPC_PORT: "0",
    METRICS_PORT: "0",
    ...env,
  });
  const log = createLogger("accounts-test", process.env.TEST_LOG_LEVEL ?? "silent");
  const accounts = await startAccounts(config, log, options);
  const callers = allowedCallerClient(AccountsServiceClient, `127.0.0.1:${accounts.port}`, ACCOUNTS_CALLERS, certs);
  const client = callers.client;
  const db = new pg.Client({ connectionString: config.DATABASE_URL, options: "-c search_path=accounts" });
  await db.connect();
  const nc = await connectNats(TEST_NATS_URL, "accounts-test", log);

  return {
    accounts,
    client,
    nc,
    names: eventNames(prefix),
    /** Signs up a fresh address from its own client IP, so tests never meet the per-IP limit. */
    signUp(email = uniqueEmail(), password = "correct horse battery") {
      return client.createAccount({ email, password, clientIp: uniqueIp() });
    },
    async query<R extends Record<string, unknown>>(sql: string, params: unknown[] = []): Promise<R[]> {
      return (await db.query<R>(sql, params)).rows;
    },
    async close() {
      callers.close();
      await db.end();
      await accounts.close();
      await nc.drain();
    },
  };
}

export type TestAccounts = Awaited<ReturnType<typeof startTestAccounts>>;

export function uniqueEmail(): string {
  return `user-${randomBytes(6).toString("hex")}@example.com`;
}

/** An address from the documentation range 2001:db8::/32, different on every call. */
export function uniqueIp(): string {
  const hex = randomBytes(6).toString("hex");
  return `2001:db8:${hex.slice(0, 4)}:${hex.slice(4, 8)}:${hex.slice(8, 12)}::1`;
}

/** The error a promise rejects with (failing the test when it resolves). */
export async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error("expected the call to fail, but it succeeded");
    },
    (err: unknown) => err,
  );
}
