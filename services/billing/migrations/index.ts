import type { MigrationObject } from "@mikro-orm/core";
import { Migration20261122000000Initial } from "./Migration20261122000000Initial.ts";
import { Migration20261123000000TopUps } from "./Migration20261123000000TopUps.ts";
import { Migration20261124000000UsageExportIndex } from "./Migration20261124000000UsageExportIndex.ts";
import { Migration20261127000000Subscriptions } from "./Migration20261127000000Subscriptions.ts";
import { Migration20261128000000PlanLimits } from "./Migration20261128000000PlanLimits.ts";
import { Migration20261128090000SubscriptionRenewalAndEarnings } from "./Migration20261128090000SubscriptionRenewalAndEarnings.ts";
import { Migration20261202000000UsageBySubscription } from "./Migration20261202000000UsageBySubscription.ts";
import { Migration20261210000000AdmissionLeases } from "./Migration20261210000000AdmissionLeases.ts";
import { Migration20261217000000LeaseBudgets } from "./Migration20261217000000LeaseBudgets.ts";
import { Migration20261220000000GenerationDetails } from "./Migration20261220000000GenerationDetails.ts";
import { Migration20261224000000LeaseBudgetTerms } from "./Migration20261224000000LeaseBudgetTerms.ts";
import { Migration20261228000000DropReservations } from "./Migration20261228000000DropReservations.ts";
import { Migration20261230000000KeySpendLimits } from "./Migration20261230000000KeySpendLimits.ts";
import { Migration20261231000000SettlementWriteCost } from "./Migration20261231000000SettlementWriteCost.ts";
import { Migration20270105000000EdgeIncarnations } from "./Migration20270105000000EdgeIncarnations.ts";
import { Migration20270110000000ImplicitSubscriptions } from "./Migration20270110000000ImplicitSubscriptions.ts";
import { Migration20270115000000CachedInput } from "./Migration20270115000000CachedInput.ts";
import { Migration20270125000000BatchJournal } from "./Migration20270125000000BatchJournal.ts";
import { Migration20270130000000MoneyChecks } from "./Migration20270130000000MoneyChecks.ts";
import { Migration20270131000000HeartbeatWrites } from "./Migration20270131000000HeartbeatWrites.ts";
import { Migration20270201000000LeaseBounds } from "./Migration20270201000000LeaseBounds.ts";
import { Migration20270202000000RollupQueue } from "./Migration20270202000000RollupQueue.ts";
import { Migration20270203000000UsageDeadLetters } from "./Migration20270203000000UsageDeadLetters.ts";
import { Migration20270204000000UsageRecordsAppend } from "./Migration20270204000000UsageRecordsAppend.ts";

/** Billing's committed migrations, in order. */
export const migrations: MigrationObject[] = [
  { name: "Migration20261122000000Initial", class: Migration20261122000000Initial },
  { name: "Migration20261123000000TopUps", class: Migration20261123000000TopUps },
  { name: "Migration20261124000000UsageExportIndex", class: Migration20261124000000UsageExportIndex },
  { name: "Migration20261127000000Subscriptions", class: Migration20261127000000Subscriptions },
  { name: "Migration20261128000000PlanLimits", class: Migration20261128000000PlanLimits },
  {
    name: "Migration20261128090000SubscriptionRenewalAndEarnings",
    class: Migration20261128090000SubscriptionRenewalAndEarnings,
  },
  { name: "Migration20261202000000UsageBySubscription", class: Migration20261202000000UsageBySubscription },
  { name: "Migration20261210000000AdmissionLeases", class: Migration20261210000000AdmissionLeases },
  { name: "Migration20261217000000LeaseBudgets", class: Migration20261217000000LeaseBudgets },
  { name: "Migration20261220000000GenerationDetails", class: Migration20261220000000GenerationDetails },
  { name: "Migration20261224000000LeaseBudgetTerms", class: Migration20261224000000LeaseBudgetTerms },
  { name: "Migration20261228000000DropReservations", class: Migration20261228000000DropReservations },
  { name: "Migration20261230000000KeySpendLimits", class: Migration20261230000000KeySpendLimits },
  { name: "Migration20261231000000SettlementWriteCost", class: Migration20261231000000SettlementWriteCost },
  { name: "Migration20270105000000EdgeIncarnations", class: Migration20270105000000EdgeIncarnations },
  { name: "Migration20270110000000ImplicitSubscriptions", class: Migration20270110000000ImplicitSubscriptions },
  { name: "Migration20270115000000CachedInput", class: Migration20270115000000CachedInput },
  { name: "Migration20270125000000BatchJournal", class: Migration20270125000000BatchJournal },
  { name: "Migration20270130000000MoneyChecks", class: Migration20270130000000MoneyChecks },
  { name: "Migration20270131000000HeartbeatWrites", class: Migration20270131000000HeartbeatWrites },
  { name: "Migration20270201000000LeaseBounds", class: Migration20270201000000LeaseBounds },
  { name: "Migration20270202000000RollupQueue", class: Migration20270202000000RollupQueue },
  { name: "Migration20270203000000UsageDeadLetters", class: Migration20270203000000UsageDeadLetters },
  { name: "Migration20270204000000UsageRecordsAppend", class: Migration20270204000000UsageRecordsAppend },
];
