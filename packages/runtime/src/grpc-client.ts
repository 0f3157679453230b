import {
  Metadata,
  type ChannelCredentials,
  type CallOptions,
  type ChannelOptions,
  type Client,
  type ClientUnaryCall,
  type ServiceError,
} from "@grpc/grpc-js";
import { AppError } from "./errors.ts";
import { channelCredentials, type ServiceTls } from "./service-tls.ts";

type UnaryMethod<Req, Res> = (
  request: Req,
  metadata: Metadata,
  options: Partial<CallOptions>,
  callback: (error: ServiceError | null, response: Res) => void,
) => ClientUnaryCall;

export interface CallSettings {
  /** Per-call deadline; defaults to the client's. */
  timeoutMs?: number;
}

/** The unary methods of a ts-proto grpc-js client, as promise-returning functions. */
export type PromiseClient<C> = {
  [K in keyof C as C[K] extends UnaryMethod<never, unknown> ? K : never]: C[K] extends UnaryMethod<infer Req, infer Res>
    ? (request: Req, settings?: CallSettings) => Promise<Res>
    : never;
};

/**
 * Every client balances per call over all the addresses its target resolves to: with a
 * `dns:///billing:50052` target on a headless Service that is every ready pod, with
 * `ipv4:127.0.0.1:A,127.0.0.1:B` both listed servers. grpc-js's default, `pick_first`, would send
 * everything over one connection to one replica. `round_robin` keeps a connection to each address
 * and skips those not READY, so a replica that dies stops getting calls as soon as its
 * connection drops (docs/deploy.md, "Balancing across replicas").
 */
export const SERVICE_CONFIG = { loadBalancingConfig: [{ round_robin: {} }] };

export const CHANNEL_OPTIONS: ChannelOptions = {
  "grpc.service_config": JSON.stringify(SERVICE_CONFIG),
  // Our config, not one a DNS TXT record could swap in (and no TXT lookup on every resolution).
  "grpc.service_config_disable_resolution": 1,
  // A connection to a pod that vanished without a FIN (node lost, partition) is found dead
  // within 40 s even when idle, instead of when the next call on it times out.
  "grpc.keepalive_time_ms": 30_000,
  "grpc.keepalive_timeout_ms": 10_000,
  "grpc.keepalive_permit_without_calls": 1,
  // A dropped connection or a server's GOAWAY (max connection age, grpc-server.ts) asks the
  // resolver again; 30 s by default between lookups, 5 s here so a scale-up is seen quickly.
  "grpc.dns_min_time_between_resolutions_ms": 5_000,
  // A restarted service is reconnected within a second of its return (test/faults bounds recovery
  // at 5 s): grpc-js's default back-off starts at 1 s and grows 1.6× to 120 s, so a service down
  // for a few seconds was retried up to ~2.5 s after it was back. A connection attempt a second to
  // a service that stays down costs nothing worth saving.
  "grpc.initial_reconnect_backoff_ms": 250,
  "grpc.max_reconnect_backoff_ms": 1_000,
  "grpc.max_receive_message_length": 16 << 20,
};

/**
 * Builds a ts-proto client balancing round-robin over every address `address` resolves to
 * (`host:port`, `dns:///host:port` or `ipv4:a:p,b:q`). With `tls` it presents that certificate
 * and checks the server's against the CA (the host name it dials must be one of the server's
 * SANs); null is plaintext (TLS_MODE=off). `options` adds to or overrides CHANNEL_OPTIONS.
 */
export function createClient<C extends Client>(
  ClientClass: new (address: string, creds: ChannelCredentials, options?: ChannelOptions) => C,
  address: string,
  tls: ServiceTls | null,
  options: ChannelOptions = {},
): C {
  return new ClientClass(address, channelCredentials(tls), { ...CHANNEL_OPTIONS, ...options });
}

/**
 * Wraps a client so each unary method returns a promise, with a deadline, and rejects with an
 * AppError decoded from the gRPC status and metadata.
 */
export function promiseClient<C extends Client>(client: C, defaultTimeoutMs = 10_000): PromiseClient<C> {
  return new Proxy({} as PromiseClient<C>, {
    get(_target, name: string) {
      const method = (client as unknown as Record<string, UnaryMethod<unknown, unknown>>)[name];
      if (typeof method !== "function") return undefined;
      return (request: unknown, settings: CallSettings = {}) =>
        new Promise((resolve, reject) => {
          const deadline = Date.now() + (settings.timeoutMs ?? defaultTimeoutMs);
          method.call(client, request, new Metadata(), { deadline }, (err, response) =>
            err ? reject(AppError.fromGrpc(err)) : resolve(response),
          );
        });
    },
  });
}
