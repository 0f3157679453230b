import net from "node:net";

/**
 * A TCP proxy to `target` ("host:port"), so a test can cut one client's connections to a server
 * (and only its own) and keep them from coming back for a while: a NATS connection, or an edge's
 * gRPC calls to billing.
 */
export async function startTcpProxy(target: string) {
  const { hostname, port } = new URL(`tcp://${target}`);
  const sockets = new Set<net.Socket>();
  let refusing = false;
  const server = net.createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = net.connect(Number(port), hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => {});
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    /** What a client connects to instead of `target`. */
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

export type TcpProxy = Awaited<ReturnType<typeof startTcpProxy>>;
