import {
  credentials,
  Metadata,
  type CallOptions,
  type ChannelOptions,
  type Client,
  type ClientUnaryCall,
  type ServiceError,
} from "@grpc/grpc-js";
import { AppError } from "./errors.ts";

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

export const CHANNEL_OPTIONS: ChannelOptions = {
  "grpc.keepalive_time_ms": 30_000,
  "grpc.keepalive_timeout_ms": 10_000,
  "grpc.max_receive_message_length": 16 << 20,
};

/**
 * Builds a ts-proto client on an insecure channel (traffic stays inside the cluster network);
 * `options` adds to or overrides CHANNEL_OPTIONS for this client's channel.
 */
export function createClient<C extends Client>(
  ClientClass: new (
    address: string,
    creds: ReturnType<typeof credentials.createInsecure>,
    options?: ChannelOptions,
  ) => C,
  address: string,
  options: ChannelOptions = {},
): C {
  return new ClientClass(address, credentials.createInsecure(), { ...CHANNEL_OPTIONS, ...options });
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
