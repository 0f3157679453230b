// First: the heap settings must hold before the service allocates (see the module).
import "@mkt/runtime/heap-growth";
import { createLogger } from "@mkt/runtime/logger";
import { onShutdown } from "@mkt/runtime/shutdown";
import { loadHosterServerConfig } from "./config.ts";
import { startHosterServer } from "./server.ts";

const config = loadHosterServerConfig();
const log = createLogger("hoster-server", config.LOG_LEVEL);
const server = await startHosterServer(config, log);
onShutdown(log, [["http", () => server.close()]]);
