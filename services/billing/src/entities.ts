import type { EntitySchema } from "@mikro-orm/core";
import { Wallet } from "./wallets/wallet.entity.ts";
import { JournalEntry, LedgerPosting } from "./wallets/ledger.entity.ts";
import { RateCounter } from "./rate-limits/rate-counter.entity.ts";
import { UsageRecord } from "./usage/usage-record.entity.ts";
import { UsageHourly } from "./usage/usage-hourly.entity.ts";
import { EdgeSession, Lease, LeaseAllowance, LeaseBudget } from "./leases/lease.entity.ts";
import { KeyLimit } from "./key-limits/key-limit.entity.ts";
import { Subscription } from "./subscriptions/subscription.entity.ts";
import { SubscriptionRateCounter, SubscriptionUsage } from "./subscriptions/subscription-usage.entity.ts";

/** Every entity of the billing schema, for openDatabase. */
export const entities = [
  Wallet,
  JournalEntry,
  LedgerPosting,
  RateCounter,
  UsageRecord,
  UsageHourly,
  Subscription,
  SubscriptionUsage,
  SubscriptionRateCounter,
  EdgeSession,
  Lease,
  LeaseAllowance,
  LeaseBudget,
  KeyLimit,
] as unknown as EntitySchema[];
