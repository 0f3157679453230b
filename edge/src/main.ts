import { createLogger } from "@mkt/runtime/logger";
import { onShutdown } from "@mkt/runtime/shutdown";
import { loadEdgeConfig } from "./config.ts";
import { startEdge } from "./server.ts";

const config = loadEdgeConfig();
const log = createLogger("edge", config.LOG_LEVEL);
const edge = await startEdge(config, log);
onShutdown(log, [["edge", () => edge.close()]]);
