/**
 * The one switch for tracing (docs/deploy.md, "Reading a trace"): on when an OTLP endpoint is set,
 * unless the standard OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none turn it off again.
 */
export function tracingEnabled(env: NodeJS.ProcessEnv): boolean {
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!endpoint) return false;
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true") return false;
  return env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() !== "none";
}
