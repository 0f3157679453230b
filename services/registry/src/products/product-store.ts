import type { Orm } from "@mkt/runtime/db";
import type { EntityManager } from "@mikro-orm/postgresql";
import { ProductTerms } from "@mkt/proto/registry/v1/registry";
import type { HosterStatus } from "../hosters/hoster.entity.ts";
import type { ProductStatus } from "./product.entity.ts";

/** A plan as stored. */
export interface StoredProduct {
  id: string;
  hosterId: string;
  terms: ProductTerms;
  status: ProductStatus;
  createdAt: Date;
  updatedAt: Date;
}

/** A plan with what the subscription saga needs to know of its hoster. */
export interface ProductWithHoster {
  product: StoredProduct;
  hosterName: string;
  hosterStatus: HosterStatus;
}

type Bigintish = string | number | bigint;

interface ProductRow {
  id: string;
  hoster_id: string;
  name: string;
  description: string;
  pricing_model: string;
  monthly_price_micros: Bigintish;
  included_tokens: Bigintish;
  input_price_per_1m_micros: Bigintish;
  output_price_per_1m_micros: Bigintish;
  overage_price_per_1m_micros: Bigintish;
  cached_input_price_per_1m_micros: Bigintish | null;
  rpm_limit: Bigintish;
  tpm_limit: Bigintish;
  max_concurrent: Bigintish;
  max_output_tokens: Bigintish;
  max_context_tokens: Bigintish;
  open: boolean;
  status: ProductStatus;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = `p.id, p.hoster_id, p.name, p.description, p.pricing_model, p.monthly_price_micros, p.included_tokens,
  p.input_price_per_1m_micros, p.output_price_per_1m_micros, p.overage_price_per_1m_micros,
  p.cached_input_price_per_1m_micros, p.rpm_limit, p.tpm_limit, p.max_concurrent, p.max_output_tokens,
  p.max_context_tokens, p.open, p.status, p.created_at, p.updated_at`;

/** The terms columns in insert / update order, with the value each takes from ProductTerms. */
const TERM_COLUMNS: Array<[string, (t: ProductTerms) => string | null]> = [
  ["name", (t) => t.name],
  ["description", (t) => t.description],
  ["pricing_model", (t) => t.pricingModel],
  ["monthly_price_micros", (t) => t.monthlyPriceMicros.toString()],
  ["included_tokens", (t) => t.includedTokens.toString()],
  ["input_price_per_1m_micros", (t) => t.inputPricePer1mMicros.toString()],
  ["output_price_per_1m_micros", (t) => t.outputPricePer1mMicros.toString()],
  ["overage_price_per_1m_micros", (t) => t.overagePricePer1mMicros.toString()],
  // Null, not 0: absent means the input (overage) price, and 0 is a price.
  ["cached_input_price_per_1m_micros", (t) => t.cachedInputPricePer1mMicros?.toString() ?? null],
  ["rpm_limit", (t) => t.rpmLimit.toString()],
  ["tpm_limit", (t) => t.tpmLimit.toString()],
  ["max_concurrent", (t) => t.maxConcurrent.toString()],
  ["max_output_tokens", (t) => t.maxOutputTokens.toString()],
  ["max_context_tokens", (t) => t.maxContextTokens.toString()],
  ["open", (t) => String(t.open)],
];

function fromRow(r: ProductRow): StoredProduct {
  return {
    id: r.id,
    hosterId: r.hoster_id,
    terms: ProductTerms.fromPartial({
      name: r.name,
      description: r.description,
      pricingModel: r.pricing_model,
      monthlyPriceMicros: BigInt(r.monthly_price_micros),
      includedTokens: BigInt(r.included_tokens),
      inputPricePer1mMicros: BigInt(r.input_price_per_1m_micros),
      outputPricePer1mMicros: BigInt(r.output_price_per_1m_micros),
      overagePricePer1mMicros: BigInt(r.overage_price_per_1m_micros),
      cachedInputPricePer1mMicros:
        r.cached_input_price_per_1m_micros === null ? undefined : BigInt(r.cached_input_price_per_1m_micros),
      rpmLimit: BigInt(r.rpm_limit),
      tpmLimit: BigInt(r.tpm_limit),
      maxConcurrent: BigInt(r.max_concurrent),
      maxOutputTokens: BigInt(r.max_output_tokens),
      maxContextTokens: BigInt(r.max_context_tokens),
      open: r.open,
    }),
    status: r.status,
    createdAt: new Date(r.created_at),
    updatedAt: new Date(r.updated_at),
  };
}

/** Why an insert did not happen. */
export type InsertRefusal = "no_hoster" | "too_many_active" | "too_many";

/**
 * The products table. Changes to one plan run under a lock on its row, so concurrent edits and
 * archives of the same plan apply one after the other; creates lock the hoster's row, so the
 * per-hoster plan limits hold under concurrent creates.
 */
export class ProductStore {
  readonly #orm: Orm;

  constructor(orm: Orm) {
    this.#orm = orm;
  }

  /**
   * Inserts an active plan for a registered hoster, unless the hoster already has `maxActive`
   * active plans or `maxTotal` plans in all.
   */
  async insert(
    product: { id: string; hosterId: string; terms: ProductTerms },
    limits: { maxActive: number; maxTotal: number },
  ): Promise<StoredProduct | InsertRefusal> {
    return this.#orm.em.fork().transactional(async (em) => {
      const hoster = await em.execute(`select id from hosters where id = ? and status <> 'registering' for update`, [
        product.hosterId,
      ]);
      if (hoster.length === 0) return "no_hoster";
      const [counts] = (await em.execute(
        `select count(*) filter (where status = 'active') as active, count(*) as total from products where hoster_id = ?`,
        [product.hosterId],
      )) as Array<{ active: Bigintish; total: Bigintish }>;
      if (Number(counts!.active) >= limits.maxActive) return "too_many_active";
      if (Number(counts!.total) >= limits.maxTotal) return "too_many";
      const rows = (await em.execute(
        `insert into products as p (id, hoster_id, ${TERM_COLUMNS.map(([c]) => c).join(", ")})
         values (?, ?, ${TERM_COLUMNS.map(() => "?").join(", ")})
         returning ${COLUMNS}`,
        [product.id, product.hosterId, ...TERM_COLUMNS.map(([, value]) => value(product.terms))],
      )) as ProductRow[];
      return fromRow(rows[0]!);
    });
  }

  /** One plan by id, with its hoster's name and health. */
  async getWithHoster(id: string): Promise<ProductWithHoster | undefined> {
    const rows = (await this.#orm.em.fork().execute(
      `select ${COLUMNS}, h.name as hoster_name, h.status as hoster_status
       from products p join hosters h on h.id = p.hoster_id where p.id = ?`,
      [id],
    )) as Array<ProductRow & { hoster_name: string; hoster_status: HosterStatus }>;
    const row = rows[0];
    return row && { product: fromRow(row), hosterName: row.hoster_name, hosterStatus: row.hoster_status };
  }

  /** A hoster's plans, archived ones included, oldest first. */
  async listByHoster(hosterId: string): Promise<StoredProduct[]> {
    const rows = (await this.#orm.em
      .fork()
      .execute(`select ${COLUMNS} from products p where p.hoster_id = ? order by p.created_at, p.id`, [
        hosterId,
      ])) as ProductRow[];
    return rows.map(fromRow);
  }

  /** The active plans of every hoster, oldest first, by hoster id. */
  async activeByHoster(): Promise<Map<string, StoredProduct[]>> {
    const rows = (await this.#orm.em
      .fork()
      .execute(
        `select ${COLUMNS} from products p where p.status = 'active' order by p.hoster_id, p.created_at, p.id`,
      )) as ProductRow[];
    const byHoster = new Map<string, StoredProduct[]>();
    for (const row of rows) {
      const list = byHoster.get(row.hoster_id) ?? [];
      list.push(fromRow(row));
      byHoster.set(row.hoster_id, list);
    }
    return byHoster;
  }

  /**
   * Runs `change` on one of the hoster's plans under a row lock, in a transaction. `change` gets
   * the plan as it is and returns what to write: new terms, `archive`, or nothing (no write).
   * Undefined when the hoster has no such plan.
   */
  async modify(
    hosterId: string,
    id: string,
    change: (current: StoredProduct) => ProductTerms | "archive" | undefined,
  ): Promise<StoredProduct | undefined> {
    return this.#orm.em.fork().transactional(async (em) => {
      const rows = (await em.execute(
        `select ${COLUMNS} from products p where p.id = ? and p.hoster_id = ? for update`,
        [id, hosterId],
      )) as ProductRow[];
      if (rows.length === 0) return undefined;
      const current = fromRow(rows[0]!);
      const next = change(current);
      if (next === undefined) return current;
      if (next === "archive") {
        return this.#update(em, `status = 'archived', archived_at = now(), updated_at = now()`, [], id);
      }
      return this.#update(
        em,
        `${TERM_COLUMNS.map(([c]) => `${c} = ?`).join(", ")}, updated_at = now()`,
        TERM_COLUMNS.map(([, value]) => value(next)),
        id,
      );
    });
  }

  async #update(em: EntityManager, set: string, params: unknown[], id: string): Promise<StoredProduct> {
    const rows = (await em.execute(`update products as p set ${set} where p.id = ? returning ${COLUMNS}`, [
      ...params,
      id,
    ])) as ProductRow[];
    return fromRow(rows[0]!);
  }
}
