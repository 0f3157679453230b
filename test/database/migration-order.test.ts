import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { migrations as accounts } from "../../services/accounts/migrations/index.ts";
import { migrations as billing } from "../../services/billing/migrations/index.ts";
import { migrations as registry } from "../../services/registry/migrations/index.ts";

// Each service's migrations run in its list's order (MikroORM applies, in list order, whatever a
// database has not recorded), so the list may only grow at its end, and a name must sort after
// every name before it (docs/migrations.md). The names written before that rule are kept as they
// are: billing's list once took a migration whose name sorts before the one above it.

const GRANDFATHERED: Record<string, string[]> = {
  accounts: [
    "Migration20261123000000Initial",
    "Migration20261123120000HostersAndSessions",
    "Migration20261127000000ScopedKeys",
    "Migration20261201000000SessionKeys",
    "Migration20261202000000KeyHolders",
  ],
  billing: [
    "Migration20261122000000Initial",
    "Migration20261123000000TopUps",
    "Migration20261124000000UsageExportIndex",
    "Migration20261127000000Subscriptions",
    "Migration20261128000000PlanLimits",
    "Migration20261128090000SubscriptionRenewalAndEarnings",
    "Migration20261202000000UsageBySubscription",
    "Migration20261210000000AdmissionLeases",
    "Migration20261217000000LeaseBudgets",
    "Migration20261220000000GenerationDetails",
    "Migration20261224000000LeaseBudgetTerms",
    "Migration20261228000000DropReservations",
    "Migration20261230000000KeySpendLimits",
    "Migration20261231000000SettlementWriteCost",
    "Migration20270105000000EdgeIncarnations",
    "Migration20270110000000ImplicitSubscriptions",
    "Migration20270115000000CachedInput",
  ],
  registry: [
    "Migration20261125000000Hosters",
    "Migration20261126000000Products",
    "Migration20261127120000HosterUsageMismatches",
    "Migration20261220000000UsageOutbox",
    "Migration20261228000000DropUsageOutbox",
    "Migration20261229000000HosterModelKinds",
    "Migration20261230000000OpenPlansAndEndpoints",
    "Migration20261231000000EndpointMinutes",
    "Migration20261231100000Verification",
    "Migration20270115000000ProductCachedInputPrice",
  ],
};

const LISTS = { accounts, billing, registry };
const NAME = /^Migration\d{14}[A-Z][A-Za-z0-9]*$/;

describe.each(Object.entries(LISTS))("the %s service's migrations", (service, list) => {
  const names = list.map((m) => m.name);

  it("keep the names written before the rule, in their order, at the head of the list", () => {
    expect(names.slice(0, GRANDFATHERED[service]!.length)).toEqual(GRANDFATHERED[service]);
  });

  it("grow only at the end: each later name sorts after every name above it", () => {
    for (let i = GRANDFATHERED[service]!.length; i < names.length; i++) {
      const above = names.slice(0, i);
      const out = above.filter((name) => name >= names[i]!);
      expect(out, `${names[i]} must sort after ${out.join(", ")}`).toEqual([]);
    }
  });

  it("are named Migration<14 digits><Description>, each in its own file of that name", () => {
    const dir = join(import.meta.dirname, `../../services/${service}/migrations`);
    for (const { name, class: migration } of list) {
      expect(name).toMatch(NAME);
      expect((migration as { name: string }).name).toBe(name);
      expect(readFileSync(join(dir, `${name}.ts`), "utf8")).toContain(`export class ${name} extends Migration`);
    }
    expect(new Set(names).size).toBe(names.length);
  });
});
