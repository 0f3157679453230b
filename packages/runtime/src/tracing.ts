/**
 * Starts the OpenTelemetry SDK; imported only by tracing-register.ts, and only when tracing is on.
 * The exporter, its protocol (http/protobuf, http/json, grpc), the batch delays and the sampler
 * come from the standard OTEL_* variables, which NodeSDK reads itself.
 */
import { register } from "node:module";
import { basename, dirname } from "node:path";

// ESM imports of these packages go through import-in-the-middle; only they are wrapped, so the
// rest of the module graph loads as it would untraced.
register("@opentelemetry/instrumentation/hook.mjs", import.meta.url, {
  data: { include: ["@grpc/grpc-js", "pg", "pg-pool", "undici", "http", "https", "node:http", "node:https"] },
});

const [
  { NodeSDK },
  { HttpInstrumentation },
  { GrpcInstrumentation },
  { UndiciInstrumentation },
  { PgInstrumentation },
] = await Promise.all([
  import("@opentelemetry/sdk-node"),
  import("@opentelemetry/instrumentation-http"),
  import("@opentelemetry/instrumentation-grpc"),
  import("@opentelemetry/instrumentation-undici"),
  import("@opentelemetry/instrumentation-pg"),
]);

/** Probes and scrapes arrive every few seconds and would bury the traces worth reading. */
const UNTRACED_PATHS = new Set(["/healthz", "/readyz", "/metrics", "/health"]);

// services/billing/src/main.ts → "billing", edge/src/main.ts → "edge": one name per process
// without each launcher having to set OTEL_SERVICE_NAME (which still wins).
if (!process.env.OTEL_SERVICE_NAME && !/service\.name=/.test(process.env.OTEL_RESOURCE_ATTRIBUTES ?? "")) {
  const entry = process.argv[1] ?? "node";
  process.env.OTEL_SERVICE_NAME = basename(dirname(dirname(entry)));
}

const sdk = new NodeSDK({
  instrumentations: [
    new HttpInstrumentation({
      ignoreIncomingRequestHook: (req) => UNTRACED_PATHS.has((req.url ?? "").split("?")[0]!),
    }),
    new GrpcInstrumentation(),
    new UndiciInstrumentation(),
    // A span per query is what a slow request is read with; the statement text carries no
    // values (MikroORM sends parameters separately).
    new PgInstrumentation({ requireParentSpan: true }),
  ],
});
// Spans still in the batch are sent by flushTraces() (trace-context.ts) before the process exits.
sdk.start();
