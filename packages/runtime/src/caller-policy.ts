import { ServerInterceptingCall, type ServerInterceptor, type ServiceDefinition } from "@grpc/grpc-js";
import { AppError } from "./errors.ts";
import type { Logger } from "./logger.ts";
import { callerIdentity, type ServiceName } from "./service-identity.ts";

/**
 * Who may call each RPC of a service: one entry per method of its server interface (the compiler
 * checks that none is missing), naming the services whose certificate is accepted. Each service
 * keeps its table next to its service definition (`<service>-callers.ts`).
 */
export type CallerTable<Server> = {
  // Generated server interfaces extend grpc-js's string index signature: only the named methods count.
  readonly [Method in keyof Server as string extends Method ? never : Method]: readonly ServiceName[];
};

/**
 * A server interceptor enforcing the services' caller tables with mTLS on: a call whose
 * certificate names a service not listed for the method ends with PERMISSION_DENIED (`forbidden`
 * through AppError, so the edge renders it like any other refusal) before the handler runs.
 * A method absent from every table is refused to everyone. Callers without a certificate the CA
 * signed never get here: the TLS handshake refuses them.
 */
export function callerPolicy(
  services: Array<[ServiceDefinition, Record<string, readonly ServiceName[]>]>,
  log: Logger,
): ServerInterceptor {
  const allowed = new Map<string, ReadonlySet<ServiceName>>();
  for (const [definition, callers] of services) {
    for (const [name, method] of Object.entries(definition)) allowed.set(method.path, new Set(callers[name] ?? []));
  }
  return (method, call) =>
    new ServerInterceptingCall(call, {
      start: (next) =>
        next({
          onReceiveMetadata: (metadata, proceed) => {
            const caller = callerIdentity(call.getAuthContext().sslPeerCertificate);
            if (caller && allowed.get(method.path)?.has(caller)) return proceed(metadata);
            log.warn({ caller: caller ?? "unknown", method: method.path }, "caller not allowed; call refused");
            const refusal = new AppError("forbidden", `${caller ?? "This caller"} may not call ${method.path}.`);
            call.sendStatus(refusal.toGrpc() as Parameters<typeof call.sendStatus>[0]);
          },
        }),
    });
}
