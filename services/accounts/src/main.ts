// First: the heap settings must hold before the service allocates (see the module).
import "@mkt/runtime/heap-growth";
import { createLogger } from "@mkt/runtime/logger";
import { onShutdown } from "@mkt/runtime/shutdown";
import { loadAccountsConfig } from "./config.ts";
import { startAccounts } from "./server.ts";

const config = loadAccountsConfig();
const log = createLogger("accounts", config.LOG_LEVEL);
const accounts = await startAccounts(config, log);
onShutdown(log, [["accounts", () => accounts.close()]]);
