// First: the heap settings must hold before the service allocates (see the module).
import "@mkt/runtime/heap-growth";
import { createLogger } from "@mkt/runtime/logger";
import { onShutdown } from "@mkt/runtime/shutdown";
import { loadBillingConfig } from "./config.ts";
import { startBilling } from "./server.ts";

const config = loadBillingConfig();
const log = createLogger("billing", config.LOG_LEVEL);
const billing = await startBilling(config, log);
onShutdown(log, [["billing", () => billing.close()]]);
