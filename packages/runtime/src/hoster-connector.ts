import { Agent, buildConnector } from "undici";
import { guardedLookup, literalAddressRefusal } from "./endpoint-guard.ts";

export interface HosterAgentOptions {
  /** ALLOW_PRIVATE_UPSTREAMS: tests and local demos call hosters on loopback. */
  allowPrivate: boolean;
  connectTimeoutMs: number;
}

/**
 * The `connect` option of every undici dispatcher that calls a hoster's server. It checks the
 * address each new connection is actually opened to (names through `guardedLookup`, IP literals
 * directly), so the registration-time check cannot be bypassed by DNS rebinding or a later DNS
 * change. With `allowPrivate` it is a plain connector with the timeout.
 */
export function guardedConnect(
  options: HosterAgentOptions,
): Partial<buildConnector.BuildOptions> | buildConnector.connector {
  if (options.allowPrivate) return { timeout: options.connectTimeoutMs };
  const connect = buildConnector({ timeout: options.connectTimeoutMs, lookup: guardedLookup });
  return (connectOptions, callback) => {
    const refusal = literalAddressRefusal(connectOptions.hostname);
    if (refusal) return callback(refusal, null);
    connect(connectOptions, callback);
  };
}

/**
 * The undici Agent for registration checks and health probes (chat calls to hosters go through
 * UpstreamPools' guarded pools, which use the same connector). Redirects are never followed
 * (undici's default), so a 30x cannot lead elsewhere either.
 */
export function hosterAgent(options: HosterAgentOptions): Agent {
  return new Agent({ keepAliveTimeout: 10_000, pipelining: 1, connect: guardedConnect(options) });
}
