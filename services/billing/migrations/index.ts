import type { MigrationObject } from "@mikro-orm/core";
import { Migration20261122000000Initial } from "./Migration20261122000000Initial.ts";

/** Billing's committed migrations, in order. */
export const migrations: MigrationObject[] = [
  { name: "Migration20261122000000Initial", class: Migration20261122000000Initial },
];
