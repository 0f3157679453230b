import { randomUUID } from "node:crypto";
import type { LeaseState } from "@mkt/proto/billing/v1/leases";
import { settleOnLease, type LeaseUsage } from "./billing-harness.ts";
import type { BillingWithPeers } from "./saga-peers.ts";

/** A subscriptions row as SQL reads it back (bigint columns arrive as text). */
export interface SubscriptionDbRow extends Record<string, unknown> {
  status: string;
  pricing_model: string;
  period_index: number;
  period_start: Date;
  period_end: Date;
  monthly_price_micros: string;
  included_tokens: string;
  input_price_per_1m_micros: string;
  output_price_per_1m_micros: string;
  overage_price_per_1m_micros: string;
  rpm_limit: string;
  tpm_limit: string;
  max_concurrent: string;
  max_output_tokens: string;
  max_context_tokens: string;
}

/**
 * What renewal tests do to billing with its saga peers: make customers, subscribe them, admit and
 * settle their scoped keys' requests on leases, and read back the row and the fees the ledger holds. Takes
 * the peers lazily, since test files start them in `beforeAll`.
 */
export function subscriptionDriver(peers: () => BillingWithPeers) {
  const t = () => peers().billing;
  return {
    /** A new customer account (5 USD starting credit) topped up by `topUpMicros`. */
    async customer(topUpMicros = 0n): Promise<string> {
      const { account } = await peers().accounts.signUp();
      const accountId = account!.accountId;
      if (topUpMicros > 0n) {
        await t().client.addCredits({ accountId, amountMicros: topUpMicros, idempotencyKey: "seed" });
      }
      return accountId;
    },

    async subscribe(accountId: string, productId: string) {
      const { subscription } = await t().client.createSubscription({ accountId, productId, idempotencyKey: "" });
      return subscription!;
    },

    async balance(accountId: string): Promise<bigint> {
      return (await t().client.getBalance({ accountId })).creditBalanceMicros;
    },

    async row(subscriptionId: string): Promise<SubscriptionDbRow> {
      const [found] = await t().query<SubscriptionDbRow>(`select * from subscriptions where id = $1`, [subscriptionId]);
      return found!;
    },

    /** The fee postings of one period of a subscription, by ledger account. */
    async fee(subscriptionId: string, periodIndex: number): Promise<Record<string, bigint>> {
      const rows = await t().query<{ ledger_account: string; amount_micros: string }>(
        `select p.ledger_account, p.amount_micros from journal_entries e join ledger_postings p on p.entry_id = e.id
         where e.kind = 'subscription_fee' and e.reference = $1`,
        [`${subscriptionId}:${periodIndex}`],
      );
      return Object.fromEntries(rows.map((r) => [r.ledger_account, BigInt(r.amount_micros)]));
    },

    async feeCount(subscriptionId: string): Promise<number> {
      const rows = await t().query(
        `select 1 from journal_entries where kind = 'subscription_fee' and reference like $1`,
        [`${subscriptionId}:%`],
      );
      return rows.length;
    },

    /**
     * A lease grant for one request on the subscription's scoped key (worst case: 100 prompt and
     * 10 output tokens), as an edge asks it; the lease stays open, holding the request's slot.
     * Refusals (the subscription's state, its plan's limits) throw. Returns the lease, whose
     * budget carries the terms the edge prices and limits by.
     */
    async grantScoped(accountId: string, subscriptionId: string, tokens = 110n): Promise<LeaseState> {
      const { lease } = await t().client.grantLease({
        edgeId: `edge_${randomUUID()}`,
        incarnation: 0n,
        bootId: "",
        sequence: 1n,
        accountId,
        tier: "free",
        minCreditMicros: 0n,
        request: { creditMicros: 0n, requests: 1n, tokens, subscriptionId, keyId: "" },
      });
      return lease!;
    },

    /** One request on the subscription's scoped key for a hoster model, admitted and settled. */
    async settleScoped(accountId: string, subscriptionId: string, hosterId: string, usage: Partial<LeaseUsage> = {}) {
      return settleOnLease(t(), {
        accountId,
        subscriptionId,
        provider: "hoster",
        hosterId,
        modelId: "hoster-model.gguf",
        // Registry prices hoster routes at 0: the subscription's terms price the request.
        inputPricePer1mMicros: 0n,
        outputPricePer1mMicros: 0n,
        worstCaseMicros: 0n,
        inputTokens: 100n,
        outputTokens: 10n,
        ...usage,
      });
    },
  };
}
