import type { MigrationObject } from "@mikro-orm/core";
import { Migration20261122000000Initial } from "./Migration20261122000000Initial.ts";
import { Migration20261123000000TopUps } from "./Migration20261123000000TopUps.ts";
import { Migration20261124000000UsageExportIndex } from "./Migration20261124000000UsageExportIndex.ts";
import { Migration20261127000000Subscriptions } from "./Migration20261127000000Subscriptions.ts";
import { Migration20261128000000PlanLimits } from "./Migration20261128000000PlanLimits.ts";
import { Migration20261128090000SubscriptionRenewalAndEarnings } from "./Migration20261128090000SubscriptionRenewalAndEarnings.ts";

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
];
