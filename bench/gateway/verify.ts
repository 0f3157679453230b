/**
 * Scenario 5: what our system billed, compared request by request with what the load generator
 * sent and received, straight from the bench database (billing's tables, schema `billing`).
 *
 * What is assumed of a request, by what the client saw:
 *   - 200 with a whole answer (JSON with usage, or a stream ending in [DONE]): exactly one usage
 *     record, success = true, input/output tokens equal to the usage the client received, cost =
 *     costMicros(tokens, the model's configured prices) (billing caps it at the admitted worst
 *     case, which a whole answer within its output cap never reaches), platform fee/hoster share
 *     by splitRevenue, charged to the account whose key sent it.
 *   - 200 whose stream ended in an error event: exactly one record, success = false.
 *   - any other status (4xx, 429, 5xx): the edge may have refused before admitting it (no
 *     record) or failed after (a failed record): at most one record, and if there is one it has
 *     success = false.
 *   - no response, or a 200 cut short on the client's side: at most one record, either outcome
 *     (the upstream may have finished before the cut reached it).
 * And for the whole database: no usage record the load generator did not send (beyond requests
 * that never got an x-request-id back), once the load is quiet no closed lease still holding
 * credit and every open one holding exactly its unspent credit (granted − settled: an idle lease
 * stays open for LEASE_IDLE_MS keeping about one request's worth), each wallet's hold the sum of
 * its leases', every journal entry balanced, and per account: the customer ledger
 * postings add up to the wallet's posted balance, and the usage debits to the sum of its usage
 * records' cost.
 */
import pg from "pg";
import { costMicros, splitRevenue } from "@mkt/runtime/money";
import type { RequestRecord } from "./load.ts";
import type { Account } from "./system.ts";

export interface Verdict {
  scenario: string;
  ok: boolean;
  sent: number;
  usageRecords: number;
  settleSeconds: number;
  /** Requests by what was expected of them. */
  expectedSuccess: number;
  expectedFailed: number;
  optional: number;
  /** Non-200 answers that have no usage record (refused before admission, by assumption). */
  refusedWithoutRecord: number;
  problems: string[];
}

interface UsageRow {
  request_id: string;
  account_id: string;
  model_id: string;
  provider: string;
  input_tokens: string;
  output_tokens: string;
  cost_micros: string;
  platform_fee_micros: string;
  hoster_earned_micros: string;
  success: boolean;
}

const MAX_LISTED = 5;

/**
 * Leases holding other than they should once every request settled: a closed one nothing; an
 * open or fenced one its credit granted less what settled (the room it keeps for the account's
 * next requests, not spent: the shown balance leaves it out).
 */
const HOLDING_TOO_MUCH = `select count(*) as n from leases l
  where l.held_micros <> case when l.status = 'closed' then 0 else coalesce((select a.granted from lease_allowances a
    where a.lease_id = l.id and a.resource = 'credit'), 0) - l.settled_micros end`;

export class Verifier {
  private readonly db: pg.Client;

  private readonly accounts: readonly Account[];
  private readonly accountOf: (r: RequestRecord) => Account;
  private readonly model: string;
  private readonly prices: { input: bigint; output: bigint };

  constructor(
    databaseUrl: string,
    /** Every account the bench made (each has a wallet). */
    accounts: readonly Account[],
    /** The account whose key a request was sent with. */
    accountOf: (r: RequestRecord) => Account,
    model: string,
    prices: { input: bigint; output: bigint },
  ) {
    this.accounts = accounts;
    this.accountOf = accountOf;
    this.model = model;
    this.prices = prices;
    this.db = new pg.Client({ connectionString: databaseUrl, options: "-c search_path=billing" });
  }

  async connect(): Promise<void> {
    await this.db.connect();
  }

  async close(): Promise<void> {
    await this.db.end().catch(() => undefined);
  }

  private async count(sql: string): Promise<number> {
    const { rows } = await this.db.query<{ n: string }>(sql);
    return Number(rows[0]!.n);
  }

  /**
   * Waits until billing has settled every request that must have a record and no lease holds
   * more than it should once they have (HOLDING_TOO_MUCH): a closed lease nothing, an open one
   * its unspent credit.
   */
  private async settled(required: number, timeoutMs: number): Promise<{ ok: boolean; seconds: number }> {
    const started = performance.now();
    for (;;) {
      const records = await this.count(`select count(*) as n from usage_records`);
      const held = await this.count(HOLDING_TOO_MUCH);
      if (records >= required && held === 0) return { ok: true, seconds: (performance.now() - started) / 1000 };
      if (performance.now() - started > timeoutMs) {
        console.log(`  settlement timed out: ${records} usage records (≥ ${required} expected), ${held} held`);
        return { ok: false, seconds: (performance.now() - started) / 1000 };
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /** Checks everything sent to our system so far (`records`: all of it, warm-ups included). */
  async verify(scenario: string, records: readonly RequestRecord[], timeoutMs: number): Promise<Verdict> {
    const problems: string[] = [];
    const listed = new Map<string, number>();
    const problem = (kind: string, detail: string) => {
      const n = (listed.get(kind) ?? 0) + 1;
      listed.set(kind, n);
      if (n <= MAX_LISTED) problems.push(`${kind}: ${detail}`);
    };
    const mustSucceed = (r: RequestRecord) => r.status === 200 && r.complete;
    const mustFail = (r: RequestRecord) => r.status === 200 && r.serverError;
    const required = records.filter((r) => mustSucceed(r) || mustFail(r)).length;
    const settle = await this.settled(required, timeoutMs);
    if (!settle.ok) problem("not settled", `fewer than ${required} usage records or leases still holding credit`);

    const { rows } = await this.db.query<UsageRow>(`
      select request_id, account_id, model_id, provider, input_tokens, output_tokens, cost_micros,
        platform_fee_micros, hoster_earned_micros, success
      from usage_records`);
    const byId = new Map(rows.map((row) => [row.request_id, row]));

    let expectedSuccess = 0;
    let expectedFailed = 0;
    let optional = 0;
    let refusedWithoutRecord = 0;
    let withoutId = 0;
    const sentIds = new Set<string>();
    for (const r of records) {
      if (!r.requestId) {
        withoutId++;
        if (r.status !== 0) problem("no x-request-id", `status ${r.status}`);
        continue;
      }
      if (sentIds.has(r.requestId)) problem("request id seen twice", r.requestId);
      sentIds.add(r.requestId);
      const row = byId.get(r.requestId);
      const account = this.accountOf(r);
      if (row && row.account_id !== account.accountId) {
        problem("wrong account", `${r.requestId}: ${row.account_id}, sent with the key of ${account.accountId}`);
      }
      if (mustSucceed(r)) {
        expectedSuccess++;
        if (!row) problem("missing usage record", `${r.requestId} (${r.scenario}, 200)`);
        else this.checkSuccess(r, row, problem);
      } else if (mustFail(r)) {
        expectedFailed++;
        if (!row) problem("missing failed usage record", `${r.requestId} (${r.scenario}, stream error)`);
        else if (row.success) problem("failed request recorded as success", r.requestId);
      } else {
        optional++;
        if (!row) {
          if (r.status !== 0 && r.status !== 200) refusedWithoutRecord++;
        } else if (r.status !== 0 && r.status !== 200 && row.success) {
          problem("failed request recorded as success", `${r.requestId} (status ${r.status})`);
        }
      }
    }
    const unexpected = rows.filter((row) => !sentIds.has(row.request_id));
    if (unexpected.length > withoutId) {
      for (const row of unexpected) problem("usage record nobody sent", row.request_id);
    }

    await this.checkBooks(problem);
    for (const [kind, n] of listed) if (n > MAX_LISTED) problems.push(`${kind}: … ${n} in all`);
    return {
      scenario,
      ok: problems.length === 0,
      sent: records.length,
      usageRecords: rows.length,
      settleSeconds: settle.seconds,
      expectedSuccess,
      expectedFailed,
      optional,
      refusedWithoutRecord,
      problems,
    };
  }

  private checkSuccess(r: RequestRecord, row: UsageRow, problem: (kind: string, detail: string) => void): void {
    const id = r.requestId!;
    if (!row.success) problem("successful request recorded as failed", id);
    if (row.model_id !== this.model) problem("wrong model", `${id}: ${row.model_id}`);
    const input = BigInt(row.input_tokens);
    const output = BigInt(row.output_tokens);
    if (r.promptTokens === undefined || input !== BigInt(r.promptTokens)) {
      problem("input tokens differ", `${id}: record ${input}, client got ${r.promptTokens}`);
    }
    if (r.completionTokens === undefined || output !== BigInt(r.completionTokens)) {
      problem("output tokens differ", `${id}: record ${output}, client got ${r.completionTokens}`);
    }
    // Priced from the client's usage at the model's prices, so a token or price mismatch shows here.
    const expected = costMicros(
      BigInt(r.promptTokens ?? -1),
      BigInt(r.completionTokens ?? -1),
      this.prices.input,
      this.prices.output,
    );
    const cost = BigInt(row.cost_micros);
    if (cost !== expected) problem("cost differs from the price formula", `${id}: ${cost}, expected ${expected}`);
    const split = splitRevenue(cost, row.provider === "hoster");
    if (
      BigInt(row.platform_fee_micros) !== split.platformFee ||
      BigInt(row.hoster_earned_micros) !== split.hosterEarned
    ) {
      problem("revenue split differs", `${id}: ${row.platform_fee_micros}/${row.hoster_earned_micros}`);
    }
  }

  private async checkBooks(problem: (kind: string, detail: string) => void): Promise<void> {
    const leasing = await this.count(HOLDING_TOO_MUCH);
    if (leasing) problem("leases holding other than their unspent credit", String(leasing));
    const unmatched = await this.count(`select count(*) as n from wallets w where w.held_micros <>
      coalesce((select sum(l.held_micros) from leases l where l.account_id = w.account_id), 0)`);
    if (unmatched) problem("wallet held ≠ its leases' holds", String(unmatched));
    const unbalanced = await this.count(`select count(*) as n from (select entry_id from ledger_postings
      group by entry_id having sum(amount_micros) <> 0) e`);
    if (unbalanced) problem("unbalanced journal entries", String(unbalanced));
    const { rows } = await this.db.query<{
      account_id: string;
      posted: string;
      postings: string;
      debits: string;
      charged: string;
    }>(`
      select w.account_id, w.posted_micros as posted,
        coalesce((select sum(p.amount_micros) from ledger_postings p
          where p.ledger_account = 'customer:' || w.account_id), 0) as postings,
        coalesce((select -sum(p.amount_micros) from ledger_postings p join journal_entries e on e.id = p.entry_id
          where e.kind in ('usage', 'usage_batch') and p.ledger_account = 'customer:' || w.account_id), 0) as debits,
        coalesce((select sum(u.cost_micros - u.write_off_micros) from usage_records u
          where u.account_id = w.account_id), 0) as charged
      from wallets w`);
    for (const w of rows) {
      if (BigInt(w.postings) !== BigInt(w.posted)) {
        problem("ledger ≠ wallet balance", `${w.account_id}: postings ${w.postings}, wallet ${w.posted}`);
      }
      if (BigInt(w.debits) !== BigInt(w.charged)) {
        problem("usage debits ≠ usage cost", `${w.account_id}: debits ${w.debits}, usage records ${w.charged}`);
      }
    }
    if (rows.length < this.accounts.length) problem("wallets missing", `${rows.length} of ${this.accounts.length}`);
  }
}
