import type { MigrationObject } from "@mikro-orm/core";
import { Migration20261125000000Hosters } from "./Migration20261125000000Hosters.ts";

/** Registry's committed migrations, in order. */
export const migrations: MigrationObject[] = [
  { name: "Migration20261125000000Hosters", class: Migration20261125000000Hosters },
];
