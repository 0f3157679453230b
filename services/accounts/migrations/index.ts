import type { MigrationObject } from "@mikro-orm/core";
import { Migration20261123000000Initial } from "./Migration20261123000000Initial.ts";
import { Migration20261123120000HostersAndSessions } from "./Migration20261123120000HostersAndSessions.ts";
import { Migration20261127000000ScopedKeys } from "./Migration20261127000000ScopedKeys.ts";
import { Migration20261201000000SessionKeys } from "./Migration20261201000000SessionKeys.ts";
import { Migration20261202000000KeyHolders } from "./Migration20261202000000KeyHolders.ts";

/** Accounts' committed migrations, in order. */
export const migrations: MigrationObject[] = [
  { name: "Migration20261123000000Initial", class: Migration20261123000000Initial },
  { name: "Migration20261123120000HostersAndSessions", class: Migration20261123120000HostersAndSessions },
  { name: "Migration20261127000000ScopedKeys", class: Migration20261127000000ScopedKeys },
  { name: "Migration20261201000000SessionKeys", class: Migration20261201000000SessionKeys },
  { name: "Migration20261202000000KeyHolders", class: Migration20261202000000KeyHolders },
];
