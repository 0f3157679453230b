import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, type Orm } from "@mkt/runtime/db";
import { AppError } from "@mkt/runtime/errors";
import { createLogger } from "@mkt/runtime/logger";
import { eventNames, type NatsConnection } from "@mkt/runtime/nats";
import { freshDatabaseUrl } from "@mkt/testkit/env";
import { KeyRevoked } from "@mkt/proto/events/v1/events";
import { migrations } from "../migrations/index.ts";
import { createAccount } from "../src/accounts/create-account.ts";
import { loadAccountsConfig } from "../src/config.ts";
import type { AccountsContext } from "../src/context.ts";
import { entities } from "../src/entities.ts";
import { ipAttempts } from "../src/ip-attempts.ts";
import { revokeApiKey } from "../src/keys/revoke-api-key.ts";
import { uniqueEmail } from "./accounts-harness.ts";

// The order "commit → publish → flush → answer" checked step by step, with a NATS connection
// whose flush the test completes by hand.
let orm: Orm;
const log = createLogger("accounts-test", process.env.TEST_LOG_LEVEL ?? "silent");
beforeAll(async () => {
  const url = await freshDatabaseUrl();
  orm = await openDatabase({ url, schema: "accounts", entities, migrations, migrate: true, log });
});
afterAll(async () => {
  await orm?.close();
});

function fakeNats(flush: () => Promise<void>) {
  const published: Array<{ subject: string; event: KeyRevoked }> = [];
  const nc = {
    publish: (subject: string, data: Uint8Array) => published.push({ subject, event: KeyRevoked.decode(data) }),
    flush,
    // No edge holds these keys: nothing acks, nothing is waited for.
    subscribe: () => ({ unsubscribe: () => undefined }),
  } as unknown as NatsConnection;
  return { nc, published };
}

async function setup(nc: NatsConnection) {
  const config = loadAccountsConfig({ EVENTS_PREFIX: "fake.", TLS_MODE: "off" });
  const ctx: AccountsContext = { orm, config, log, nc, names: eventNames("fake."), clock: () => new Date() };
  const { account, key } = await createAccount(ctx, ipAttempts(ctx), {
    email: uniqueEmail(),
    password: "long enough",
    clientIp: "",
  });
  return { ctx, accountId: account!.accountId, keyId: key!.keyId };
}

describe("announcing a revocation", () => {
  it("answers only after the flush completes, with the key already revoked in the database", async () => {
    let completeFlush!: () => void;
    const { nc, published } = fakeNats(() => new Promise<void>((resolve) => (completeFlush = resolve)));
    const { ctx, accountId, keyId } = await setup(nc);

    let answered = false;
    const revoking = revokeApiKey(ctx, { accountId, keyId }).then((res) => {
      answered = true;
      return res;
    });
    await expect.poll(() => published.length).toBe(1);
    expect(published[0]).toEqual({ subject: "fake.keys.revoked", event: { keyId, accountId } });
    const [row] = await orm.em.fork().execute(`select revoked_at from api_keys where id = ?`, [keyId]);
    expect(row?.revoked_at).not.toBeNull(); // committed before the announcement
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(answered).toBe(false);

    completeFlush();
    expect((await revoking).key?.revokedAt).not.toBe("");
  });

  it("reports the failure (the key stays revoked) and announces again when retried", async () => {
    let failing = true;
    const { nc, published } = fakeNats(async () => {
      if (failing) throw new Error("connection closed");
    });
    const { ctx, accountId, keyId } = await setup(nc);

    const err = await revokeApiKey(ctx, { accountId, keyId }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect(err).toMatchObject({ code: "service_unavailable" });
    failing = false;
    await revokeApiKey(ctx, { accountId, keyId });
    expect(published.map((p) => p.event)).toEqual([
      { keyId, accountId },
      { keyId, accountId },
    ]);
  });
});
