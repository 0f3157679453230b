import type { Expression, ExpressionBuilder, Kysely, SqlBool } from "kysely";
import { billingDb, compiling, type BillingDb, type LeasesAsL, type LeaseWhere } from "../billing-db.ts";
import type { Em } from "../context.ts";
import { int8 } from "../context.ts";
import type { LimitReset } from "../key-limits/key-windows.ts";
import { allowanceResource } from "./allowance-resource.ts";
import type { BudgetRow, KeyLimitRow, LeaseRow, WalletRow } from "./lease-rows.ts";

export { creditOf } from "./lease-rows.ts";
export type { AllowanceRow, BudgetRow, KeyLimitRow, LeaseRow, WalletRow } from "./lease-rows.ts";

// Every lease call reads the same way: the wallets of its accounts locked first, in account
// order, then its leases read with everything under them, each in one typed statement with bound
// parameters. What the call then changes goes back through write-batch.ts (lease-writes.ts).

/**
 * Locks the accounts' wallets in ascending order, the order every lease transaction and fence
 * takes them in. Grants and heartbeats take the lock an UPDATE takes (they change held_micros in
 * the same transaction) rather than FOR SHARE, whose upgrade would deadlock two edges' heartbeats;
 * either way a fence (FOR UPDATE) commits entirely before or entirely after them.
 */
export async function lockWallets(em: Em, accountIds: Iterable<string>): Promise<Map<string, WalletRow>> {
  const ids = [...new Set(accountIds)];
  if (ids.length === 0) return new Map();
  return lockWhere(em, (w) => w("w.account_id", "=", w.fn.any(w.val(ids))));
}

/**
 * lockWallets for the accounts of the leases matching `where`, found in the same statement: a
 * call that knows its leases, not their accounts, locks in one round trip instead of two. The
 * leases themselves are read after (loadLeases): this statement's snapshot predates the locks it
 * may wait for, so a lease read in it could miss what a fence committed meanwhile.
 */
export function lockWalletsOf(em: Em, where: LeaseWhere): Promise<Map<string, WalletRow>> {
  return lockWhere(em, (w) =>
    w(
      "w.account_id",
      "in",
      w
        .selectFrom("leases as l")
        .select("l.account_id")
        // This builder has `w` in scope too; a LeaseWhere reads only `l`.
        .where((l) => where(l as unknown as ExpressionBuilder<LeasesAsL, "l">)),
    ),
  );
}

/** The wallets a batch of usage events charges: those of its leases' accounts (settle-batch.ts). */
export function lockLeaseWallets(em: Em, leaseIds: readonly string[]): Promise<Map<string, WalletRow>> {
  if (leaseIds.length === 0) return Promise.resolve(new Map());
  return lockWalletsOf(em, (l) => l("l.id", "=", l.fn.any(l.val([...leaseIds]))));
}

type WalletsAsW = BillingDb & { w: BillingDb["wallets"] };

async function lockWhere(
  em: Em,
  where: (w: ExpressionBuilder<WalletsAsW, "w">) => Expression<SqlBool>,
): Promise<Map<string, WalletRow>> {
  const db = await billingDb(em);
  const rows = await db
    .selectFrom("wallets as w")
    .select(["w.account_id", "w.posted_micros", "w.held_micros"])
    .where(where)
    .orderBy("w.account_id")
    .forNoKeyUpdate()
    .execute();
  return new Map(rows.map((w) => [w.account_id, { posted: int8(w.posted_micros), held: int8(w.held_micros) }]));
}

/**
 * The leases matching `where` with their allowances, budgets and the account's limited keys. Read
 * after the wallets are locked, in a statement of its own, so it sees whatever a fence committed
 * before the lock was granted.
 */
export async function loadLeases(em: Em, where: LeaseWhere): Promise<LeaseRow[]> {
  const db = await billingDb(em);
  const { rows } = await db.executeQuery(LEASES.where(where).compile());
  return rows.map(leaseRowOf);
}

/**
 * One row per lease: its columns, then its allowances, budgets and the account's limited keys as
 * one array per column, each in the same order (the key last, so the arrays line up row by row).
 * Arrays rather than json_agg: no document built per lease, no bigint cast to text to outlive
 * JSON's numbers, and one statement still reads a lease with everything under it.
 */
function leasesSelect(db: Kysely<BillingDb>) {
  return db
    .selectFrom("leases as l")
    .leftJoinLateral(
      (eb) =>
        eb
          .selectFrom("lease_allowances as a")
          .whereRef("a.lease_id", "=", "l.id")
          .select((a) => {
            const agg = <T>(column: `a.${keyof BillingDb["lease_allowances"] & string}`) =>
              a.fn
                .agg<T[] | null>("array_agg", [column])
                .orderBy("a.resource")
                .orderBy("a.window_start")
                .orderBy("a.id");
            return [
              agg<string>("a.id").as("allowance_id"),
              agg<string>("a.scope").as("allowance_scope"),
              agg<string>("a.resource").as("allowance_resource"),
              agg<Date | string | null>("a.window_start").as("allowance_start"),
              agg<Date | string | null>("a.window_end").as("allowance_end"),
              agg<string>("a.granted").as("allowance_granted"),
              agg<string>("a.admitted").as("allowance_admitted"),
              agg<string>("a.settled").as("allowance_settled"),
            ];
          })
          .as("al"),
      (join) => join.onTrue(),
    )
    .leftJoinLateral(
      (eb) =>
        eb
          .selectFrom("lease_budgets as b")
          .whereRef("b.lease_id", "=", "l.id")
          .select((b) => {
            const agg = <T>(column: `b.${keyof BillingDb["lease_budgets"] & string}`) =>
              b.fn.agg<T[] | null>("array_agg", [column]).orderBy("b.subscription_id");
            return [
              agg<string>("b.subscription_id").as("budget_subscription"),
              agg<string>("b.status").as("budget_status"),
              agg<string>("b.state").as("budget_state"),
              agg<number>("b.period_index").as("budget_period"),
              agg<string | null>("b.hoster_id").as("budget_hoster"),
              agg<string>("b.pricing_model").as("budget_pricing"),
              agg<string>("b.input_price_per_1m_micros").as("budget_input_price"),
              agg<string>("b.output_price_per_1m_micros").as("budget_output_price"),
              agg<string>("b.overage_price_per_1m_micros").as("budget_overage_price"),
              agg<string | null>("b.cached_input_price_per_1m_micros").as("budget_cached_price"),
              agg<string>("b.max_context_tokens").as("budget_max_context"),
              agg<string>("b.max_output_tokens").as("budget_max_output"),
              agg<string>("b.rpm_limit").as("budget_rpm"),
              agg<string | null>("b.product_id").as("budget_product"),
            ];
          })
          .as("bu"),
      (join) => join.onTrue(),
    )
    .leftJoinLateral(
      (eb) =>
        eb
          .selectFrom("key_limits as k")
          .whereRef("k.account_id", "=", "l.account_id")
          .where("k.limit_micros", "is not", null)
          .select((k) => [
            k.fn.agg<string[] | null>("array_agg", ["k.key_id"]).orderBy("k.key_id").as("limited_key"),
            k.fn.agg<string[] | null>("array_agg", ["k.limit_micros"]).orderBy("k.key_id").as("limited_micros"),
            k.fn
              .agg<Array<string | null> | null>("array_agg", ["k.limit_reset"])
              .orderBy("k.key_id")
              .as("limited_reset"),
          ])
          .as("kl"),
      (join) => join.onTrue(),
    )
    .select([
      "l.id",
      "l.edge_id",
      "l.account_id",
      "l.tier",
      "l.status",
      "l.applied_sequence",
      "l.held_micros",
      "l.settled_micros",
      "l.released_at",
      "l.deadline",
      "l.isolation_ms",
      "l.max_request_ms",
    ])
    .selectAll(["al", "bu", "kl"])
    .orderBy("l.account_id")
    .orderBy("l.created_at");
}

type LeaseColumns = Awaited<ReturnType<ReturnType<typeof leasesSelect>["executeTakeFirstOrThrow"]>>;

const date = (value: Date | string | null) => (value === null ? null : new Date(value));
const int8Or = (value: string | null) => (value === null ? undefined : int8(value));

/**
 * A row of leasesSelect as a LeaseRow: bigint and timestamptz come as text (BillingDb), read by int8
 * and date.
 */
function leaseRowOf(row: LeaseColumns): LeaseRow {
  const budgets = row.budget_subscription ?? [];
  const keys = row.limited_key ?? [];
  return {
    id: row.id,
    edgeId: row.edge_id,
    accountId: row.account_id,
    tier: row.tier,
    status: row.status as LeaseRow["status"],
    appliedSequence: int8(row.applied_sequence),
    heldMicros: int8(row.held_micros),
    settledMicros: int8(row.settled_micros),
    releasedAt: date(row.released_at),
    deadline: date(row.deadline),
    isolationMs: row.isolation_ms === null ? null : Number(row.isolation_ms),
    maxRequestMs: row.max_request_ms === null ? null : Number(row.max_request_ms),
    allowances: (row.allowance_id ?? []).map((id, i) => ({
      id,
      scope: row.allowance_scope![i]!,
      resource: allowanceResource(row.allowance_resource![i]),
      windowStart: date(row.allowance_start![i]!),
      windowEnd: date(row.allowance_end![i]!),
      granted: int8(row.allowance_granted![i]),
      admitted: int8(row.allowance_admitted![i]),
      settled: int8(row.allowance_settled![i]),
    })),
    budgets: budgets.map((subscriptionId, i) => ({
      subscriptionId,
      status: row.budget_status![i] as BudgetRow["status"],
      state: row.budget_state![i]!,
      periodIndex: Number(row.budget_period![i]),
      terms: {
        hosterId: row.budget_hoster![i] ?? "",
        pricingModel: row.budget_pricing![i]!,
        inputPricePer1mMicros: int8(row.budget_input_price![i]),
        outputPricePer1mMicros: int8(row.budget_output_price![i]),
        overagePricePer1mMicros: int8(row.budget_overage_price![i]),
        cachedInputPricePer1mMicros: int8Or(row.budget_cached_price![i]!),
        maxContextTokens: int8(row.budget_max_context![i]),
        maxOutputTokens: int8(row.budget_max_output![i]),
        rpmLimit: int8(row.budget_rpm![i]),
        productId: row.budget_product![i] ?? "",
      },
    })),
    keyLimits: keys.map((keyId, i) => ({
      keyId,
      limitMicros: int8(row.limited_micros![i]),
      reset: (row.limited_reset![i] ?? null) as LimitReset,
    })),
  };
}

/** The account's spend-limited keys, for a lease just opened (loadLeases reads them for the others). */
export async function accountKeyLimits(em: Em, accountId: string): Promise<KeyLimitRow[]> {
  const db = await billingDb(em);
  const rows = await db
    .selectFrom("key_limits as k")
    .select(["k.key_id", "k.limit_micros", "k.limit_reset"])
    .where("k.account_id", "=", accountId)
    .where("k.limit_micros", "is not", null)
    .orderBy("k.key_id")
    .execute();
  return rows.map((k) => ({ keyId: k.key_id, limitMicros: int8(k.limit_micros), reset: k.limit_reset as LimitReset }));
}

/**
 * leasesSelect, built once: its tree of lateral joins and aggregates is the same for every call,
 * and building it anew cost billing about a sixth of its CPU per lease a heartbeat reports
 * (bench/README.md#typed-lease-reads-before-and-after). Each call adds its condition to it (a
 * builder is immutable), compiles it, and runs the statement on its own transaction.
 */
const LEASES = leasesSelect(compiling);

/** The leases with these ids as loadLeases reads them, for a statement that reads more beside them. */
export const leasesWithIds = (ids: readonly string[]) => LEASES.where((l) => l("l.id", "=", l.fn.any(l.val([...ids]))));

/** A row holding leasesWithIds' columns as a LeaseRow. */
export const toLeaseRow = (row: Record<string, unknown>): LeaseRow => leaseRowOf(row as LeaseColumns);
