import type { MigrationObject } from "@mikro-orm/core";
import { Migration20261125000000Hosters } from "./Migration20261125000000Hosters.ts";
import { Migration20261126000000Products } from "./Migration20261126000000Products.ts";
import { Migration20261127120000HosterUsageMismatches } from "./Migration20261127120000HosterUsageMismatches.ts";
import { Migration20261220000000UsageOutbox } from "./Migration20261220000000UsageOutbox.ts";
import { Migration20261228000000DropUsageOutbox } from "./Migration20261228000000DropUsageOutbox.ts";
import { Migration20261229000000HosterModelKinds } from "./Migration20261229000000HosterModelKinds.ts";
import { Migration20261230000000OpenPlansAndEndpoints } from "./Migration20261230000000OpenPlansAndEndpoints.ts";
import { Migration20261231000000EndpointMinutes } from "./Migration20261231000000EndpointMinutes.ts";
import { Migration20261231100000Verification } from "./Migration20261231100000Verification.ts";
import { Migration20270115000000ProductCachedInputPrice } from "./Migration20270115000000ProductCachedInputPrice.ts";
import { Migration20270201000000UsageDeadLetters } from "./Migration20270201000000UsageDeadLetters.ts";

/** Registry's committed migrations, in order. */
export const migrations: MigrationObject[] = [
  { name: "Migration20261125000000Hosters", class: Migration20261125000000Hosters },
  { name: "Migration20261126000000Products", class: Migration20261126000000Products },
  { name: "Migration20261127120000HosterUsageMismatches", class: Migration20261127120000HosterUsageMismatches },
  { name: "Migration20261220000000UsageOutbox", class: Migration20261220000000UsageOutbox },
  { name: "Migration20261228000000DropUsageOutbox", class: Migration20261228000000DropUsageOutbox },
  { name: "Migration20261229000000HosterModelKinds", class: Migration20261229000000HosterModelKinds },
  { name: "Migration20261230000000OpenPlansAndEndpoints", class: Migration20261230000000OpenPlansAndEndpoints },
  { name: "Migration20261231000000EndpointMinutes", class: Migration20261231000000EndpointMinutes },
  { name: "Migration20261231100000Verification", class: Migration20261231100000Verification },
  { name: "Migration20270115000000ProductCachedInputPrice", class: Migration20270115000000ProductCachedInputPrice },
  { name: "Migration20270201000000UsageDeadLetters", class: Migration20270201000000UsageDeadLetters },
];
