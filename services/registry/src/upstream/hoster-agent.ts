import { Agent, buildConnector } from "undici";
import { guardedLookup, literalAddressRefusal } from "./endpoint-guard.ts";

export interface HosterAgentOptions {
  /** ALLOW_PRIVATE_UPSTREAMS: tests and local demos call hosters on loopback. */
  allowPrivate: boolean;
  connectTimeoutMs: number;
}

/**
 * The undici Agent every call to a hoster's server goes through (registration checks, health
 * probes). Its connector checks the address each new connection is actually opened to (names
 * through `guardedLookup`, IP literals directly), so the registration-time check cannot be
 * bypassed by DNS rebinding or a later DNS change. Redirects are never followed (undici's
 * default), so a 30x cannot lead elsewhere either.
 */
export function hosterAgent(options: HosterAgentOptions): Agent {
  const base = { keepAliveTimeout: 10_000, pipelining: 1 };
  if (options.allowPrivate) return new Agent({ ...base, connect: { timeout: options.connectTimeoutMs } });
  const connect = buildConnector({ timeout: options.connectTimeoutMs, lookup: guardedLookup });
  return new Agent({
    ...base,
    connect(connectOptions, callback) {
      const refusal = literalAddressRefusal(connectOptions.hostname);
      if (refusal) return callback(refusal, null);
      connect(connectOptions, callback);
    },
  });
}
