// First: the heap settings must hold before the service allocates (see the module).
import "@mkt/runtime/heap-growth";
import { createLogger } from "@mkt/runtime/logger";
import { onShutdown } from "@mkt/runtime/shutdown";
import { loadEdgeConfig } from "./config.ts";
import { startEdge } from "./server.ts";

const config = loadEdgeConfig();
const log = createLogger("edge", config.LOG_LEVEL);
const edge = await startEdge(config, log);
// The process deadline leaves room for the readiness delay, the grace period and the NATS drain.
onShutdown(log, [["edge", () => edge.close()]], config.SHUTDOWN_READINESS_DELAY_MS + config.SHUTDOWN_GRACE_MS + 10_000);
