/**
 * Loaded before every process's entry point with `--import @mkt/runtime/tracing-register`
 * (NODE_OPTIONS in scripts/lib/processes.ts and deploy/Dockerfile). ESM instrumentation has to
 * hook module loading before the instrumented modules (grpc-js, pg, http) are linked, which a
 * first `import` in main.ts is too late for: the whole static graph is linked before any of it runs.
 *
 * Tracing is off unless an OTLP endpoint is configured, and then nothing else is imported: an
 * untraced process pays one look at its environment, and @opentelemetry/api stays a no-op.
 */
import { tracingEnabled } from "./tracing-switch.ts";

if (tracingEnabled(process.env)) await import("./tracing.ts");
