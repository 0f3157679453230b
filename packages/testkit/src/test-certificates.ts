import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Client } from "@grpc/grpc-js";
import { createClient, promiseClient, type PromiseClient } from "@mkt/runtime/grpc-client";
import { ensureServiceCertificates, serviceTlsEnv, serviceTlsFiles } from "@mkt/runtime/service-certificates";
import type { ServiceName } from "@mkt/runtime/service-identity";
import type { ServiceTls } from "@mkt/runtime/service-tls";

/** A CA and every service's certificate for this test process (tests run with mTLS on). */
export interface TestCertificates {
  dir: string;
  /** The TLS_* variables for a service's config loader. */
  env(service: ServiceName): Record<string, string>;
  /** A service's material, for a client or a double acting as that service. */
  tls(service: ServiceName): ServiceTls;
}

let pending: Promise<TestCertificates> | undefined;

/**
 * The CA and certificates of this process, made on first use into a temporary directory removed
 * at exit: ~0.1 s once per test file's process, so every harness runs the real mTLS path.
 */
export function testCertificates(): Promise<TestCertificates> {
  pending ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), "mkt-tls-"));
    process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
    await ensureServiceCertificates(dir);
    const material = new Map<ServiceName, ServiceTls>();
    return {
      dir,
      env: (service) => serviceTlsEnv(dir, service),
      tls(service) {
        let tls = material.get(service);
        if (!tls) {
          const files = serviceTlsFiles(dir, service);
          tls = { ca: readFileSync(files.ca), cert: readFileSync(files.cert), key: readFileSync(files.key) };
          material.set(service, tls);
        }
        return tls;
      },
    };
  })();
  return pending;
}

/**
 * A promise client for a service under test that makes each call as the first service its
 * caller table admits for that method (the edge for AddCredits, billing for IssueScopedKey, …),
 * so tests reach every RPC through the same allow lists production enforces.
 */
export function allowedCallerClient<C extends Client>(
  ClientClass: Parameters<typeof createClient<C>>[0],
  address: string,
  callers: Readonly<Record<string, readonly ServiceName[]>>,
  certs: TestCertificates,
): { client: PromiseClient<C>; close(): void } {
  const raw = new Map<ServiceName, C>();
  const calls = new Map<ServiceName, PromiseClient<C>>();
  const as = (caller: ServiceName) => {
    let entry = calls.get(caller);
    if (!entry) {
      const channel = createClient(ClientClass, address, certs.tls(caller));
      raw.set(caller, channel);
      entry = promiseClient(channel);
      calls.set(caller, entry);
    }
    return entry;
  };
  const client = new Proxy({} as PromiseClient<C>, {
    get: (_target, name: string) => (as(callers[name]?.[0] ?? "edge") as Record<string, unknown>)[name],
  });
  return { client, close: () => raw.forEach((channel) => channel.close()) };
}
