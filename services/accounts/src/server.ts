import { openDatabase } from "@mkt/runtime/db";
import { startGrpcServer } from "@mkt/runtime/grpc-server";
import type { Logger } from "@mkt/runtime/logger";
import { connectNats, eventNames } from "@mkt/runtime/nats";
import { AccountsServiceService } from "@mkt/proto/accounts/v1/accounts";
import { migrations } from "../migrations/index.ts";
import type { AccountsConfig } from "./config.ts";
import type { AccountsContext } from "./context.ts";
import { entities } from "./entities.ts";
import { accountsService } from "./accounts-service.ts";

export interface AccountsOptions {
  /** The clock of the per-IP sign-up windows; tests set it. */
  clock?: () => Date;
}

export interface AccountsHandle {
  port: number;
  /** Stop accepting → finish running calls → nats.drain() → orm.close(). */
  close(): Promise<void>;
}

/** Opens accounts' database and NATS connection and starts its gRPC server. */
export async function startAccounts(
  config: AccountsConfig,
  log: Logger,
  options: AccountsOptions = {},
): Promise<AccountsHandle> {
  const orm = await openDatabase({
    url: config.DATABASE_URL,
    schema: "accounts",
    entities,
    migrations,
    migrate: config.MIGRATE_ON_START,
    log,
  });
  const nc = await connectNats(config.NATS_URL, "accounts", log).catch(async (err: unknown) => {
    await orm.close();
    throw err;
  });
  const ctx: AccountsContext = {
    orm,
    config,
    log,
    nc,
    names: eventNames(config.EVENTS_PREFIX),
    clock: options.clock ?? (() => new Date()),
  };
  const grpc = await startGrpcServer(config.GRPC_HOST, config.GRPC_PORT, [
    [AccountsServiceService, accountsService(ctx)],
  ]).catch(async (err: unknown) => {
    await nc.close();
    await orm.close();
    throw err;
  });
  log.info({ port: grpc.port }, "accounts listening");

  return {
    port: grpc.port,
    async close() {
      await grpc.close();
      await nc.drain();
      await orm.close();
    },
  };
}
