import net from "node:net";
import { TEST_NATS_URL } from "./env.ts";

/**
 * A TCP proxy in front of the test NATS server, so a test can cut one client's connection (and
 * only its own) and keep it from coming back for a while.
 */
export async function startNatsProxy() {
  const target = new URL(TEST_NATS_URL);
  const sockets = new Set<net.Socket>();
  let refusing = false;
  const server = net.createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = net.connect(Number(target.port || 4222), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => {});
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    /** What a client connects to instead of TEST_NATS_URL. */
    url: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    /** Drops every connection; with `refuse`, new ones are refused until `accept()`. */
    cut({ refuse = false } = {}) {
      refusing = refuse;
      for (const s of sockets) s.destroy();
    },
    accept() {
      refusing = false;
    },
    close() {
      for (const s of sockets) s.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export type NatsProxy = Awaited<ReturnType<typeof startNatsProxy>>;
