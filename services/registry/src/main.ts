import { createLogger } from "@mkt/runtime/logger";
import { onShutdown } from "@mkt/runtime/shutdown";
import { loadRegistryConfig } from "./config.ts";
import { startRegistry } from "./server.ts";

const config = loadRegistryConfig();
const log = createLogger("registry", config.LOG_LEVEL);
const registry = await startRegistry(config, log);
onShutdown(log, [["registry", () => registry.close()]]);
