/**
 * W3C trace context across NATS: grpc-js's instrumentation carries it in gRPC metadata, but a
 * JetStream message has only its headers, so `traceparent` is put there and read back by hand.
 * Without the SDK (tracing off) no header is added and the spans are non-recording no-ops.
 */
import { context, propagation, trace, SpanKind, SpanStatusCode, type Link, type Span } from "@opentelemetry/api";
import { headers as natsHeaders, type MsgHdrs } from "@nats-io/transport-node";

export type { Span };

const tracer = trace.getTracer("@mkt/runtime");

/**
 * Starts a PRODUCER span for a NATS publish under the active context and returns it with the
 * message headers carrying its `traceparent`; both undefined when nothing is traced.
 */
export function startPublishSpan(subject: string): { span?: Span; headers?: MsgHdrs } {
  if (!trace.getActiveSpan()) return {};
  const span = tracer.startSpan(`${subject} publish`, {
    kind: SpanKind.PRODUCER,
    attributes: { "messaging.system": "nats", "messaging.destination.name": subject },
  });
  const carrier: Record<string, string> = {};
  propagation.inject(trace.setSpan(context.active(), span), carrier);
  const headers = natsHeaders();
  for (const [name, value] of Object.entries(carrier)) headers.set(name, value);
  return { span, headers };
}

/** Starts a CONSUMER span, child of the context a message's headers carry (startPublishSpan). */
export function startConsumeSpan(subject: string, headers: MsgHdrs | undefined, name = "process"): Span {
  const carrier: Record<string, string> = {};
  for (const key of headers?.keys() ?? []) carrier[key.toLowerCase()] = headers!.get(key);
  const parent = propagation.extract(context.active(), carrier);
  return tracer.startSpan(
    `${subject} ${name}`,
    { kind: SpanKind.CONSUMER, attributes: { "messaging.system": "nats", "messaging.destination.name": subject } },
    parent,
  );
}

/**
 * Runs `work` in a span that is the child of the first of `spans` and links the rest: a batch
 * settles many requests, and the first one's trace shows the batch's queries.
 */
export async function inBatchSpan<T>(name: string, spans: Span[], work: () => Promise<T>): Promise<T> {
  const links: Link[] = spans.slice(1).map((s) => ({ context: s.spanContext() }));
  const parent = spans[0] ? trace.setSpan(context.active(), spans[0]) : context.active();
  return tracer.startActiveSpan(name, { links, attributes: { "batch.size": spans.length } }, parent, async (span) => {
    try {
      return await work();
    } catch (err) {
      span.recordException(err as Error);
      span.setStatus({ code: SpanStatusCode.ERROR });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** Ends a span, marking it failed when `err` is given. */
export function endSpan(span: Span | undefined, err?: unknown): void {
  if (!span) return;
  if (err !== undefined) {
    span.recordException(err as Error);
    span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end();
}
