import type { InferKyselyDB } from "@mikro-orm/postgresql";
import {
  CompiledQuery,
  DummyDriver,
  Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type ColumnType,
  type Compilable,
  type Expression,
  type ExpressionBuilder,
  type SqlBool,
} from "kysely";
import type { Em } from "./context.ts";
import type { KeyLimit } from "./key-limits/key-limit.entity.ts";
import type { RateCounter } from "./rate-limits/rate-counter.entity.ts";
import type { UsageHourly } from "./usage/usage-hourly.entity.ts";
import type { UsageRecord } from "./usage/usage-record.entity.ts";
import type { EdgeSession, Lease, LeaseAllowance, LeaseBudget } from "./leases/lease.entity.ts";
import type { Subscription } from "./subscriptions/subscription.entity.ts";
import type { SubscriptionRateCounter, SubscriptionUsage } from "./subscriptions/subscription-usage.entity.ts";
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
 * `key_daily_spend` has no entity (settlement and the rollup write it as SQL; the migration
 * Migration20261230000000KeySpendLimits makes it), so its columns are named here, as the driver
 * reads them: nothing checks them against the table but the queries that read it.
 */
interface KeyDailySpendTable {
  key_id: string;
  /** A date, compared as 'YYYY-MM-DD'. */
  day: string;
  spent_micros: ColumnType<string, bigint, bigint>;
}

/**
 * The tables billing's typed queries read, typed from their entities (which
 * test/database/entities-match-schema.test.ts keeps equal to the migrated tables): a column
 * misspelt, or compared with a value of the wrong type, fails the typecheck instead of a call.
 * Beside them, the columns of edge_sessions an insert leaves to their defaults, and
 * key_daily_spend, which has no entity.
 */
export type BillingDb = Omit<Tables, "edge_sessions"> & {
  edge_sessions: Defaulted<Tables["edge_sessions"], "incarnation" | "boot_id" | "created_at">;
  key_daily_spend: KeyDailySpendTable;
};

/** A column the table gives a default (the entities do not say which), left out of an insert. */
type Defaulted<Table, Columns extends keyof Table> = Omit<Table, Columns> & {
  [C in Columns]: Table[C] extends ColumnType<infer S, infer I, infer U> ? ColumnType<S, I | undefined, U> : never;
};

type Tables = ReadByDriver<
  InferKyselyDB<
    | typeof Wallet
    | typeof EdgeSession
    | typeof Lease
    | typeof LeaseAllowance
    | typeof LeaseBudget
    | typeof KeyLimit
    | typeof UsageRecord
    | typeof UsageHourly
    | typeof Subscription
    | typeof SubscriptionUsage
    | typeof SubscriptionRateCounter
    | typeof RateCounter
  >
>;

/** BillingDb with `leases` aliased `l`, as the lease queries read it. */
export type LeasesAsL = BillingDb & { l: BillingDb["leases"] };

/** BillingDb with `lease_allowances` aliased `a` and their `leases` aliased `l`, as the room queries read them. */
export type AllowancesOfLeasesAsAL = BillingDb & { a: BillingDb["lease_allowances"]; l: BillingDb["leases"] };

/**
 * What a lease holds of an allowance (`a`, of lease `l`): its grant while the lease is open or
 * fenced, what it admitted once closed (the rest went back at the close). The same rule as
 * key-spend.ts's `holds`, on the rows in memory.
 */
export const heldOfAllowance = (eb: ExpressionBuilder<AllowancesOfLeasesAsAL, "a" | "l">) =>
  eb.case().when("l.status", "=", "closed").then(eb.ref("a.admitted")).else(eb.ref("a.granted")).end();

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

/**
 * A Kysely with no database, that only builds and compiles: prepare's queries, and the lease
 * select (lease-store.ts), which is built once on it and compiled per call with its condition.
 */
export const compiling = new Kysely<BillingDb>({
  dialect: {
    createAdapter: () => new PostgresAdapter(),
    createDriver: () => new DummyDriver(),
    createIntrospector: (db) => new PostgresIntrospector(db),
    createQueryCompiler: () => new PostgresQueryCompiler(),
  },
});

/** Where a prepared query binds one of a call's values: compiled in its place, replaced per call. */
class Slot {
  readonly name: string;
  constructor(name: string) {
    this.name = name;
  }
}

/**
 * A typed query whose shape is fixed, built and compiled once: `build` gets `p`, whose every
 * property stands for the call's value of that name (typed as `P` has it, so Kysely checks it
 * against its column), and each call binds its `values` in the parameters those compiled to.
 * Building and compiling even a small query cost billing 10 to 50 µs per call, and these run per
 * grant and per heartbeat transaction (bench/README.md#typed-session-and-room-queries-before-and-after).
 * A parameter `build` gave a constant stays bound as that constant. Each property of `p` must
 * compile to a parameter of its own: one nested in another value (`eb.val([p.id])`) or read while
 * building throws here. A list is one array parameter (`= any(…)`), never `in` (which would
 * compile `in $1`). Returns the rows (none for a write without RETURNING).
 */
export function prepare<P extends Record<string, unknown>, O>(
  build: (p: P, db: Kysely<BillingDb>) => Compilable<O>,
): (db: Kysely<BillingDb>, values: P) => Promise<O[]> {
  const made: Slot[] = [];
  const slots = new Proxy({}, { get: (_, name) => made[made.push(new Slot(String(name))) - 1] }) as P;
  const { sql, parameters } = build(slots, compiling).compile();
  // A slot nested in another value, or read while building, would not be bound: refused at once.
  const unbound = made.filter((slot) => !parameters.includes(slot)).map((slot) => slot.name);
  if (unbound.length > 0) throw new Error(`prepare: ${unbound.join(", ")} not compiled to a parameter: ${sql}`);
  const names = parameters.map((value) => (value instanceof Slot ? value.name : undefined));
  return async (db, values) => {
    const bound = parameters.map((value, i) => (names[i] === undefined ? value : values[names[i]]));
    const { rows } = await db.executeQuery(CompiledQuery.raw(sql, bound) as CompiledQuery<O>);
    return rows;
  };
}
