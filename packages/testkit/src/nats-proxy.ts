import { TEST_NATS_URL } from "./env.ts";
import { startTcpProxy, type TcpProxy } from "./tcp-proxy.ts";

/**
 * A TCP proxy in front of the test NATS server, so a test can cut one client's connection (and
 * only its own) and keep it from coming back for a while.
 */
export async function startNatsProxy(): Promise<TcpProxy> {
  const target = new URL(TEST_NATS_URL);
  return startTcpProxy(`${target.hostname}:${target.port || 4222}`);
}

export type NatsProxy = TcpProxy;
