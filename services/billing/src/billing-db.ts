import type { InferKyselyDB } from "@mikro-orm/postgresql";
import type { ColumnType, Expression, ExpressionBuilder, Kysely, SqlBool } from "kysely";
import type { Em } from "./context.ts";
import type { KeyLimit } from "./key-limits/key-limit.entity.ts";
import type { UsageRecord } from "./usage/usage-record.entity.ts";
import type { EdgeSession, Lease, LeaseAllowance, LeaseBudget } from "./leases/lease.entity.ts";
import type { Subscription } from "./subscriptions/subscription.entity.ts";
import type { Wallet } from "./wallets/wallet.entity.ts";
import { sendHeldWrites } from "./write-batch.ts";

/**
 * A column's value as node-postgres returns it, as MikroORM sets it up: bigint and timestamptz as
 * text (int8 and new Date read them). Kysely compares a column with values of this type too, so a
 * time is given to a query as ISO text.
 */
type Read<T> = T extends bigint ? string : T extends Date ? string : T;
type AsRead<C> = [C] extends [ColumnType<infer S, infer I, infer U>]
  ? ColumnType<Read<S>, I, U>
  : ColumnType<Read<C>, C, C>;
type ReadByDriver<Db> = { [T in keyof Db]: { [C in keyof Db[T]]: AsRead<Db[T][C]> } };

/**
 * The tables billing's typed queries read, typed from their entities (which
 * test/database/entities-match-schema.test.ts keeps equal to the migrated tables): a column
 * misspelt, or compared with a value of the wrong type, fails the typecheck instead of a call.
 */
export type BillingDb = ReadByDriver<
  InferKyselyDB<
    | typeof Wallet
    | typeof EdgeSession
    | typeof Lease
    | typeof LeaseAllowance
    | typeof LeaseBudget
    | typeof KeyLimit
    | typeof UsageRecord
    | typeof Subscription
  >
>;

/** BillingDb with `leases` aliased `l`, as the lease queries read it. */
export type LeasesAsL = BillingDb & { l: BillingDb["leases"] };

/** A condition on the leases a query reads, aliased `l`: values are bound, never spliced into SQL. */
export type LeaseWhere = (eb: ExpressionBuilder<LeasesAsL, "l">) => Expression<SqlBool>;

/**
 * MikroORM's Kysely on `em`'s transaction (em.getKysely), once the writes `em` holds back
 * (batchWrites) are sent: a typed query runs on the connection itself, not through `em.execute`,
 * and must see the transaction's own writes as a raw read would. Without `convertValues`: it
 * converts each row by the entities' metadata, which doubled billing's CPU per lease a heartbeat
 * applies (docs/adr/0046-typed-lease-queries.md); BillingDb types what the driver returns instead.
 */
export async function billingDb(em: Em): Promise<Kysely<BillingDb>> {
  await sendHeldWrites(em);
  return em.getKysely<BillingDb>();
}
