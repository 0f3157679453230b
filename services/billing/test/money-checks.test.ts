import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "@mkt/runtime/db";
import { createLogger } from "@mkt/runtime/logger";
import { freshDatabaseUrl } from "@mkt/testkit/env";
import { migrations } from "../migrations/index.ts";
import { startTestBilling, type TestBilling } from "./billing-harness.ts";

// The money invariants the schema holds beside the code (Migration20270130000000MoneyChecks): a
// write that would break one is refused by PostgreSQL whatever path makes it.

let t: TestBilling;
beforeAll(async () => {
  t = await startTestBilling();
});
afterAll(async () => {
  await t?.close();
});

/** The constraint a refused statement names, or undefined when it was not refused. */
async function refusedBy(sql: string, params: unknown[]): Promise<string | undefined> {
  try {
    await t.query(sql, params);
    return undefined;
  } catch (err) {
    return (err as { constraint?: string }).constraint;
  }
}

const record = (cost: number, fee: number, earned: number) => [randomUUID(), randomUUID(), cost, fee, earned];
const INSERT_RECORD = `insert into usage_records (request_id, account_id, key_id, model_id, provider, hoster_id,
    subscription_id, input_tokens, output_tokens, cost_micros, platform_fee_micros, hoster_earned_micros,
    latency_ms, success, error_code, created_at, finish_reason)
  values ($1, $2, 'k', 'm', 'hoster', 'h', '', 10, 10, $3, $4, $5, 1, true, '', now(), 'stop')`;

describe("money checks in the schema", () => {
  it("refuses a wallet holding more than it has posted, and allows holding all of it", async () => {
    const accountId = randomUUID();
    await t.query(`insert into wallets (account_id, posted_micros, held_micros) values ($1, 100, 0)`, [accountId]);
    expect(await refusedBy(`update wallets set held_micros = 100 where account_id = $1`, [accountId])).toBeUndefined();
    expect(await refusedBy(`update wallets set held_micros = 101 where account_id = $1`, [accountId])).toBe(
      "wallets_held_within_posted",
    );
    // A charge that would take posted below what is held is refused too.
    expect(await refusedBy(`update wallets set posted_micros = 99 where account_id = $1`, [accountId])).toBe(
      "wallets_held_within_posted",
    );
  });

  it("refuses a usage record whose fee and earning do not make its cost, or with a negative cost", async () => {
    expect(await refusedBy(INSERT_RECORD, record(100, 20, 80))).toBeUndefined();
    expect(await refusedBy(INSERT_RECORD, record(0, 0, 0))).toBeUndefined();
    expect(await refusedBy(INSERT_RECORD, record(100, 20, 79))).toBe("usage_records_cost_split");
    expect(await refusedBy(INSERT_RECORD, record(-5, -5, 0))).toBe("usage_records_cost_split");
    expect(await refusedBy(INSERT_RECORD, record(100, 120, -20))).toBe("usage_records_cost_split");
  });
});

describe("the migration that adds them", () => {
  it("stops, with the counts, on a database that already broke one", async () => {
    const url = await freshDatabaseUrl();
    const open = (list: typeof migrations) =>
      openDatabase({
        url,
        schema: "billing",
        entities: [],
        migrations: list,
        migrate: true,
        log: createLogger("money-checks-test", "silent"),
      });
    const before = migrations.findIndex((m) => m.name === "Migration20270130000000MoneyChecks");
    const orm = await open(migrations.slice(0, before));
    try {
      await orm.em
        .getConnection()
        .execute(`insert into billing.wallets (account_id, posted_micros, held_micros) values (?, 10, 11)`, [
          randomUUID(),
        ]);
    } finally {
      await orm.close();
    }
    await expect(open(migrations)).rejects.toThrow(/1 wallet\(s\) hold more than they posted, 0 usage record/);
  });
});
