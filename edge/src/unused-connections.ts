import type { Server } from "node:http";
import type { Socket } from "node:net";

/**
 * Node's `server.close()` ends idle keep-alive connections, but not a connection that has not
 * sent its first request yet: clients open those ahead of time (browsers pre-connect; undici opens
 * a fresh socket after an aborted stream), and each one would hold shutdown for the whole grace
 * period. This tracks them so close can end them at once; connections with a request in flight
 * are left to finish.
 */
export function trackUnusedConnections(server: Server): { destroyUnused(): void } {
  const unused = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    unused.add(socket);
    socket.once("close", () => unused.delete(socket));
  });
  server.on("request", (request: { socket: Socket }) => unused.delete(request.socket));
  return {
    destroyUnused() {
      for (const socket of unused) socket.destroy();
      unused.clear();
    },
  };
}
