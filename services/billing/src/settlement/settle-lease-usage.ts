import { max0, min } from "@mkt/runtime/bigint-math";
import { splitRevenue, type Micros } from "@mkt/runtime/money";
import { planPricing, requestCharge, type RequestTokens } from "@mkt/runtime/request-cost";
import type { Logger } from "@mkt/runtime/logger";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { creditOf, type AllowanceRow, type LeaseRow, type WalletRow } from "../leases/lease-store.ts";
import type { PricingModel } from "../subscriptions/plan-pricing.ts";
import { answerOf } from "../usage/usage-records.ts";
import type { SettlementWrites } from "./settlement-writes.ts";
import { settleKeySpend } from "./key-spend.ts";
import {
  clampTokens,
  recordTime,
  recordWithoutCharge,
  type Refusal,
  type SettleOutcome,
} from "./usage-without-charge.ts";

/**
 * What a batch of events is settled against (settle-batch.ts): its leases and their accounts'
 * wallets, read once after the wallets are locked and changed in memory as each event settles;
 * the requests that already have a usage record; and the writes, made once at the end.
 */
export interface SettlementBatch {
  leases: Map<string, LeaseRow>;
  wallets: Map<string, WalletRow>;
  recorded: Set<string>;
  writes: SettlementWrites;
  /** Write-offs, counted in the metrics by the caller once the transaction commits. */
  writtenOff: Micros[];
}

/**
 * Settles one usage.completed admitted on a lease in memory, against the batch's rows, keyed on request_id: a request that already has a usage record changes nothing.
 * What it changes goes to `batch.writes`, written with the rest of the batch.
 *
 * The lease's hold is `granted − settled` while open or fenced and `admitted − settled` once
 * closed (lease-store.ts). Growing `settled_micros` by the worst case released, and shrinking the
 * hold by the same amount, keeps that identity for every state: the request's worst case was part
 * of `granted` (open) and of `admitted` (closed), so once it settles it is no longer held, and the
 * difference between its worst case and its cost is free again at once. Growing `settled` by the
 * charge instead would leave worst case − charge held until the lease itself is released.
 *
 * The charge is the one cost function, clamped to the admitted worst case, and never more than
 * the wallet has once the hold is released: when the hold was already released (the lease closed
 * and released by the closer, or the event came late) whatever cannot be paid is written off
 * (the record's `write_off_micros`, a leg of the batch's entry to platform:write_offs), so a
 * balance never goes below zero. The record carries the split of its cost
 * (docs/adr/0004-platform-keeps-20-percent.md); the batch's journal entry sums the records
 * (docs/adr/0040-one-journal-entry-per-settled-batch.md).
 *
 * Only the services that relay answers may hand billing usage events (NATS permissions,
 * docs/deploy.md; RecordUsage is the edge's alone), and still an event is checked against its
 * lease, in case one is forged or garbled: one naming an unknown lease, another account's lease,
 * or a worst case beyond all the credit its lease was ever granted is refused (recorded at no
 * cost, a warning, its own outcome in the settlement metric); one whose charge exceeds what its
 * lease still holds for unsettled requests (granted − settled while open, admitted − settled once
 * closed) is charged that much at most (`clamped`).
 */
export function settleLeaseUsage(event: UsageCompleted, log: Logger, now: Date, batch: SettlementBatch): SettleOutcome {
  const lease = batch.leases.get(event.leaseId);
  const unrecorded = (refused: Refusal) => recordWithoutCharge(batch.writes, batch.recorded, event, log, refused);
  if (!lease) return unrecorded("unknown_lease");
  const { accountId } = lease;
  // The edge's event names the account it admitted the request for, which is its lease's.
  if (event.accountId && event.accountId !== accountId) {
    return unrecorded("foreign_lease");
  }
  if (batch.recorded.has(event.requestId)) return "duplicate";
  const wallet = batch.wallets.get(accountId)!;
  const worstCase = clampTokens(event.worstCaseMicros);
  // The edge takes a request's worst case from its lease's credit, which billing granted: no
  // genuine request's worst case exceeds all the credit its lease ever had.
  if (worstCase > (creditOf(lease)?.granted ?? 0n)) {
    return unrecorded("over_lease_credit");
  }
  batch.recorded.add(event.requestId);

  const inputTokens = clampTokens(event.inputTokens);
  const outputTokens = clampTokens(event.outputTokens);
  // Parts of the input and output, never trusted beyond them (the cost function clamps cached
  // tokens again; the record's check constraints hold both).
  const cachedInputTokens = min(clampTokens(event.cachedInputTokens), inputTokens);
  const reasoningTokens = min(clampTokens(event.reasoningTokens), outputTokens);
  const budget = event.subscriptionId ? budgetOf(lease, event.subscriptionId) : undefined;
  if (event.subscriptionId && !budget) {
    log.warn({ requestId: event.requestId }, "usage event names a subscription its lease has no budget for");
  }
  // The included tokens it took at admission (never more than its worst case in tokens).
  const included = min(clampTokens(event.includedTokens), clampTokens(event.worstCaseTokens));
  const priced = chargesNothing(event, outputTokens)
    ? 0n
    : priceOf(batch.writes, event, budget, { inputTokens, outputTokens, cachedInputTokens }, included, worstCase);
  // Until it is released, the lease holds the worst case of every request admitted on it and not
  // yet settled: a genuine charge fits in that hold. (Once released, the write-off rule below
  // keeps the wallet from going below zero.)
  const released = lease.releasedAt !== null;
  const clamped = !released && priced > lease.heldMicros;
  const cost = clamped ? lease.heldMicros : priced;
  if (clamped) {
    log.warn(
      { requestId: event.requestId, leaseId: event.leaseId, costMicros: priced, heldMicros: lease.heldMicros },
      "usage event's charge exceeds what its lease still holds; charged the hold",
    );
  }

  // Released: nothing is held for it any more; the closer gave it back.
  if (!released) batch.writes.release(lease, wallet, min(worstCase, lease.heldMicros));
  // With its hold released in full the wallet always covers the charge (posted ≥ held before, and
  // cost ≤ worst case); short only when the hold was gone, and then never below zero.
  const charged = min(cost, max0(wallet.posted - wallet.held));
  const shortfall = cost - charged;
  const provider = event.provider;
  const hosterId = budget?.hosterId || event.hosterId;
  const { platformFee, hosterEarned } = splitRevenue(cost, provider === "hoster");
  if (shortfall > 0n) {
    // The platform absorbs what the customer cannot pay: the hoster keeps its share of the cost.
    log.warn(
      { requestId: event.requestId, leaseId: event.leaseId, costMicros: cost, writtenOffMicros: shortfall },
      "usage settled after its lease hold was released; shortfall written off",
    );
    batch.writtenOff.push(shortfall);
  }
  batch.writes.charge(wallet, charged);
  settleKeySpend(batch.writes, lease, event, worstCase, charged, recordTime(event));
  if (!released && budget) giveBackTokens(batch.writes, lease, event, inputTokens + outputTokens, included, now);

  batch.writes.record({
    requestId: event.requestId,
    accountId,
    keyId: event.keyId,
    modelId: event.modelId,
    provider,
    hosterId,
    subscriptionId: budget ? event.subscriptionId : "",
    inputTokens,
    outputTokens,
    cachedInputTokens,
    reasoningTokens,
    costMicros: cost,
    platformFeeMicros: platformFee,
    hosterEarnedMicros: hosterEarned,
    writeOffMicros: shortfall,
    latencyMs: clampTokens(event.latencyMs),
    success: event.success,
    errorCode: event.success ? "" : event.errorCode,
    at: recordTime(event),
    answer: answerOf(event),
  });
  if (shortfall > 0n) return "late_settled";
  return clamped ? "clamped" : "settled";
}

/**
 * Nothing is charged for nothing (docs/api-tour.md#what-a-request-costs): an answer that
 * gave the caller no completion token and ended in an error, or with no finish reason (the stream
 * broke, the caller left before the first token), costs 0 and earns its hoster nothing, whatever
 * its prompt cost upstream. It is recorded with its tokens; a subscription's period does not count
 * them. Any delivered token makes the answer billable as usual.
 */
function chargesNothing(event: UsageCompleted, outputTokens: bigint): boolean {
  // A failed answer ended in an error or without a finish reason (the caller left: client_cancelled).
  return outputTokens === 0n && !event.success;
}

/** A lease budget's pricing terms as settlement reads them (not the proto's `BudgetTerms`). */
interface BudgetPricing {
  hosterId: string;
  periodIndex: number;
  pricingModel: PricingModel;
  inputPricePer1m: Micros;
  outputPricePer1m: Micros;
  overagePricePer1m: Micros;
  cachedInputPricePer1m: Micros | undefined;
}

/** The terms the lease's budget for the subscription was granted with (read with the lease). */
function budgetOf(lease: LeaseRow, subscriptionId: string): BudgetPricing | undefined {
  const budget = lease.budgets.find((b) => b.subscriptionId === subscriptionId);
  if (!budget) return undefined;
  const { terms } = budget;
  return {
    hosterId: terms.hosterId,
    periodIndex: budget.periodIndex,
    pricingModel: terms.pricingModel as PricingModel,
    inputPricePer1m: terms.inputPricePer1mMicros,
    outputPricePer1m: terms.outputPricePer1mMicros,
    overagePricePer1m: terms.overagePricePer1mMicros,
    cachedInputPricePer1m: terms.cachedInputPricePer1mMicros,
  };
}

/**
 * The request's cost by the one cost function (requestCharge, which also puts it in the answer's
 * `usage.cost`), at most its worst case: the route's prices for the account's own requests; a
 * subscription's by its budget's terms snapshot and the included tokens it took at admission
 * (an overage plan's other tokens are overage). A subscription's request counts in its period's
 * use, with the overage tokens it paid for.
 */
function priceOf(
  writes: SettlementWrites,
  event: UsageCompleted,
  budget: BudgetPricing | undefined,
  tokens: RequestTokens,
  included: bigint,
  worstCase: Micros,
): Micros {
  if (!budget) {
    // An event without a cached price (an edge from before cached pricing) prices cached tokens
    // at the input price, as that edge's answer said.
    const route = {
      inputPricePer1m: event.inputPricePer1mMicros,
      outputPricePer1m: event.outputPricePer1mMicros,
      cachedInputPricePer1m: event.cachedInputPricePer1mMicros,
    };
    return requestCharge(tokens, route, worstCase).cost;
  }
  const { cost, overageTokens } = requestCharge(tokens, planPricing(budget.pricingModel, budget, included), worstCase);
  writes.countPeriodUse({
    subscriptionId: event.subscriptionId,
    periodIndex: budget.periodIndex,
    tokens: tokens.inputTokens + tokens.outputTokens,
    overageTokens,
  });
  return cost;
}

/**
 * Gives a subscription request's unused worst-case tokens back (docs/architecture.md#settlement): to the minute's
 * tpm counter while that minute is current (a later window's count no longer matters), and to the
 * period's included tokens by settling what it took of them (`included`) out of the lease's hold
 * (`lease_allowances.settled`), while `subscription_usage` now counts what it really used.
 */
function giveBackTokens(
  writes: SettlementWrites,
  lease: LeaseRow,
  event: UsageCompleted,
  used: bigint,
  included: bigint,
  now: Date,
) {
  const worstTokens = clampTokens(event.worstCaseTokens);
  const at = recordTime(event);
  const mine = (resource: string) =>
    lease.allowances.find(
      (a) => a.scope === event.subscriptionId && a.resource === resource && within(a, at) && a.windowEnd! > now,
    );
  const tpm = mine("sub_tokens_minute");
  const unused = max0(worstTokens - used);
  if (tpm) writes.giveBackTokens(event.subscriptionId, tpm.windowStart!, unused);
  const room = mine("included_tokens");
  if (room) {
    // What it took (an overage request's worst case may have taken only part of its tokens from
    // the included room), never more than the lease still holds of it.
    const holds = (lease.status === "closed" ? room.admitted : room.granted) - room.settled;
    const settle = min(included, max0(holds));
    // The batch's later events on this lease read the row in memory.
    writes.settleRoom(room, settle);
  }
}

const within = (a: AllowanceRow, at: Date) =>
  !!a.windowStart && !!a.windowEnd && a.windowStart <= at && at < a.windowEnd;
