import type { Logger } from "@mkt/runtime/logger";
import type { Orm } from "@mkt/runtime/db";
import type { EventNames, NatsConnection } from "@mkt/runtime/nats";
import type { AccountsConfig } from "./config.ts";

/** What accounts' handlers share. */
export interface AccountsContext {
  orm: Orm;
  config: AccountsConfig;
  log: Logger;
  nc: NatsConnection;
  names: EventNames;
  /** The clock of the sign-up windows; tests set it. */
  clock: () => Date;
}

/** The entity manager of a transaction (or of a fork). */
export type Em = Orm["em"];
