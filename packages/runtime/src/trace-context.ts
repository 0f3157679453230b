/**
 * What the services need from the active trace, through @opentelemetry/api only: without the SDK
 * (tracing off, tracing-register.ts) every call here is a cheap no-op.
 */
import { context, trace, type ProxyTracerProvider } from "@opentelemetry/api";
import { getRPCMetadata, RPCType } from "@opentelemetry/core";

/** The active span's ids for a log line (pino mixin), or nothing outside a trace. */
export function traceLogFields(): { trace_id?: string; span_id?: string } {
  const span = trace.getActiveSpan();
  if (!span) return {};
  const { traceId, spanId } = span.spanContext();
  return { trace_id: traceId, span_id: spanId };
}

/**
 * The active span as a W3C `traceparent` value, for the edge's `traceresponse` header (the name
 * W3C Trace Context Level 2 gives a response's trace id), or undefined when nothing is traced.
 */
export function traceResponseHeader(): string | undefined {
  const span = trace.getActiveSpan();
  if (!span) return undefined;
  const { traceId, spanId, traceFlags } = span.spanContext();
  return `00-${traceId}-${spanId}-${traceFlags.toString(16).padStart(2, "0")}`;
}

/**
 * Names the active HTTP server span after the route that matched (`POST /v1/chat/completions`,
 * never a path holding ids): http instrumentation reads it when the response ends.
 */
export function setHttpRoute(route: string): void {
  const rpc = getRPCMetadata(context.active());
  if (rpc?.type === RPCType.HTTP) rpc.route = route;
}

/** Sends the spans still batched (at most `timeoutMs`); resolves at once when tracing is off. */
export async function flushTraces(timeoutMs = 5_000): Promise<void> {
  const provider = (trace.getTracerProvider() as ProxyTracerProvider).getDelegate() as {
    forceFlush?: () => Promise<void>;
  };
  if (typeof provider.forceFlush !== "function") return;
  await Promise.race([provider.forceFlush().catch(() => {}), new Promise((r) => setTimeout(r, timeoutMs).unref())]);
}
