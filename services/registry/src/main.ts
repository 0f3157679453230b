// First: the heap settings must hold before the service allocates (see the module).
import "@mkt/runtime/heap-growth";
import { createLogger } from "@mkt/runtime/logger";
import { onShutdown } from "@mkt/runtime/shutdown";
import { loadRegistryConfig } from "./config.ts";
import { startRegistry } from "./server.ts";

const config = loadRegistryConfig();
const log = createLogger("registry", config.LOG_LEVEL);
const registry = await startRegistry(config, log);
// Watches end at once; unary calls get the grace period; the deadline leaves room for the database and NATS to close.
onShutdown(log, [["registry", () => registry.close()]], config.SHUTDOWN_GRACE_MS + 20_000);
