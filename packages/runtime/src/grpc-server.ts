import {
  Server,
  type handleServerStreamingCall,
  type handleUnaryCall,
  type ServerUnaryCall,
  type ServerWritableStream,
  type ServiceDefinition,
  type UntypedServiceImplementation,
} from "@grpc/grpc-js";
import { callerPolicy } from "./caller-policy.ts";
import { dependencyUnavailable, isDependencyOutage } from "./dependency-outage.ts";
import { AppError } from "./errors.ts";
import type { Logger } from "./logger.ts";
import type { ServiceName } from "./service-identity.ts";
import { serverCredentials, type ServiceTls } from "./service-tls.ts";

/**
 * Turns anything thrown into a gRPC error: typed AppErrors keep their code; a dependency that is
 * down (PostgreSQL, NATS, another service) is UNAVAILABLE (the edge answers 503 with
 * `retry-after`); the rest is INTERNAL.
 */
function toGrpcError(err: unknown, log: Logger, method: string) {
  if (err instanceof AppError) return err.toGrpc();
  if (isDependencyOutage(err)) {
    log.warn({ err, method }, "a dependency is unavailable");
    return dependencyUnavailable(err).toGrpc();
  }
  log.error({ err, method }, "unhandled error in gRPC handler");
  return new AppError("internal_error", "Internal error.").toGrpc();
}

/** Adapts an async unary handler to grpc-js. */
export function unary<Req, Res>(
  log: Logger,
  method: string,
  handler: (request: Req, call: ServerUnaryCall<Req, Res>) => Promise<Res>,
): handleUnaryCall<Req, Res> {
  return (call, callback) => {
    handler(call.request, call).then(
      (response) => callback(null, response),
      (err: unknown) => callback(toGrpcError(err, log, method)),
    );
  };
}

/** Adapts an async server-streaming handler to grpc-js; the stream is ended when it resolves. */
export function serverStream<Req, Res>(
  log: Logger,
  method: string,
  handler: (call: ServerWritableStream<Req, Res>) => Promise<void>,
): handleServerStreamingCall<Req, Res> {
  return (call) => {
    handler(call).then(
      () => call.end(),
      (err: unknown) => failStream(call, err, log, method),
    );
  };
}

/**
 * Ends a streaming call with `err` as its status (nothing when it was cancelled). grpc-js sends
 * the status from the stream's final step: an emitted error becomes that status. destroy(err)
 * would skip the final step and leave the client waiting forever.
 */
function failStream<Req, Res>(call: ServerWritableStream<Req, Res>, err: unknown, log: Logger, method: string): void {
  if (call.cancelled) return;
  call.emit("error", Object.assign(new Error("stream failed"), toGrpcError(err, log, method)));
}

export interface GrpcServerHandle {
  server: Server;
  port: number;
  /** Stops accepting calls and waits up to `graceMs` for running ones before forcing. */
  close(graceMs?: number): Promise<void>;
}

export const SERVER_OPTIONS = {
  "grpc.keepalive_permit_without_calls": 1,
  "grpc.max_receive_message_length": 16 << 20,
  // Clients learn of new replicas only when they resolve their target again, which grpc-js does
  // when a connection ends. So every connection is ended after ~5 min (±10% jitter): a GOAWAY,
  // after which new calls go over a new connection made after a fresh DNS lookup, while calls
  // already running finish undisturbed (no grace limit: a streamed answer may run for minutes).
  "grpc.max_connection_age_ms": 5 * 60_000,
};

/** A service to serve: its definition, its implementation and who may call each method (caller-policy.ts). */
export type GrpcService = [ServiceDefinition, UntypedServiceImplementation, Record<string, readonly ServiceName[]>];

/**
 * Starts a gRPC server on host:port (port 0 picks a free one, as tests do). With `tls`, only
 * clients holding a certificate signed by its CA connect, and each call must come from a service
 * its method's caller table lists; with null (TLS_MODE=off) it is plaintext and trusts everyone.
 */
export async function startGrpcServer(
  host: string,
  port: number,
  services: GrpcService[],
  { tls, log }: { tls: ServiceTls | null; log: Logger },
): Promise<GrpcServerHandle> {
  const interceptors = tls
    ? [
        callerPolicy(
          services.map(([definition, , callers]) => [definition, callers]),
          log,
        ),
      ]
    : [];
  const server = new Server({ ...SERVER_OPTIONS, interceptors });
  for (const [definition, implementation] of services) server.addService(definition, implementation);
  const bound = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`${host}:${port}`, serverCredentials(tls), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return {
    server,
    port: bound,
    close: (graceMs = 10_000) =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, graceMs);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      }),
  };
}

/**
 * Writes one message of a server stream and honours flow control: when the transport's buffer is
 * full it waits for `drain`, so a slow reader holds the producer back instead of filling memory.
 * Resolves false, without writing, once the caller has cancelled.
 */
export async function writeWithBackpressure<Res>(
  call: ServerWritableStream<unknown, Res>,
  message: Res,
): Promise<boolean> {
  if (call.cancelled || call.destroyed) return false;
  if (call.write(message)) return true;
  await new Promise<void>((resolve) => {
    const done = () => {
      call.off("drain", done);
      call.off("cancelled", done);
      call.off("close", done);
      resolve();
    };
    call.on("drain", done);
    call.on("cancelled", done);
    call.on("close", done);
  });
  return !call.cancelled;
}
