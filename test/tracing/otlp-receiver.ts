/**
 * A small OTLP/HTTP trace receiver for tests: accepts `POST /v1/traces` in the http/json encoding
 * (ids as hex strings, as the OTLP spec has JSON carry them) and keeps every span it is sent.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  links: Array<{ traceId: string; spanId: string }>;
  attributes: Record<string, unknown>;
}

interface AnyValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
}
interface KeyValue {
  key: string;
  value: AnyValue;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  links?: Array<{ traceId: string; spanId: string }>;
  attributes?: KeyValue[];
}
interface ExportRequest {
  resourceSpans?: Array<{
    resource?: { attributes?: KeyValue[] };
    scopeSpans?: Array<{ spans?: OtlpSpan[] }>;
  }>;
}

const valueOf = (v: AnyValue) => v.stringValue ?? v.intValue ?? v.boolValue;
const toRecord = (kvs: KeyValue[] = []) => Object.fromEntries(kvs.map((kv) => [kv.key, valueOf(kv.value)]));

export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  /** Request bodies that were not http/json (a misconfigured exporter shows here). */
  readonly rejected: string[] = [];
  #server: Server | undefined;

  /** Listens on a free loopback port; returns the base URL for OTEL_EXPORTER_OTLP_ENDPOINT. */
  async start(): Promise<string> {
    this.#server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        if (req.url !== "/v1/traces" || !req.headers["content-type"]?.includes("application/json")) {
          this.rejected.push(`${req.method} ${req.url} ${req.headers["content-type"]}`);
          res.writeHead(415).end();
          return;
        }
        this.#add(JSON.parse(Buffer.concat(chunks).toString("utf8")) as ExportRequest);
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
      });
    });
    await new Promise<void>((resolve) => this.#server!.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  #add(body: ExportRequest): void {
    for (const rs of body.resourceSpans ?? []) {
      const service = String(toRecord(rs.resource?.attributes)["service.name"] ?? "");
      for (const ss of rs.scopeSpans ?? []) {
        for (const s of ss.spans ?? []) {
          this.spans.push({
            service,
            traceId: s.traceId,
            spanId: s.spanId,
            parentSpanId: s.parentSpanId ?? "",
            name: s.name,
            kind: s.kind,
            links: s.links ?? [],
            attributes: toRecord(s.attributes),
          });
        }
      }
    }
  }

  async stop(): Promise<void> {
    await new Promise((resolve) => this.#server?.close(resolve));
  }
}
