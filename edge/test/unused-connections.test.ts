import { createServer, type ServerResponse } from "node:http";
import { connect, type AddressInfo, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { trackUnusedConnections } from "../src/unused-connections.ts";

const closers: Array<() => void> = [];
afterEach(() => closers.splice(0).forEach((close) => close()));

const closedSignal = (socket: Socket) => new Promise<void>((resolve) => socket.once("close", () => resolve()));

describe("trackUnusedConnections", () => {
  it("ends connections that never sent a request and leaves requests in flight alone", async () => {
    let pending: ServerResponse | undefined;
    const server = createServer((_req, res) => {
      pending = res; // answered only at the end of the test
      res.writeHead(200, { "content-type": "text/plain" });
      res.write("working");
    });
    const connections = trackUnusedConnections(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    closers.push(
      () => server.closeAllConnections(),
      () => server.close(),
    );

    const open = (): Promise<Socket> =>
      new Promise((resolve) => {
        const socket = connect(port, "127.0.0.1", () => resolve(socket));
      });
    const preconnected = await open();
    const busy = await open();
    const answered = new Promise<void>((resolve) => busy.once("data", () => resolve()));
    busy.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    await answered;

    const preconnectedClosed = closedSignal(preconnected);
    connections.destroyUnused();
    await preconnectedClosed;
    expect(busy.destroyed).toBe(false);

    // The request in flight still completes on its connection.
    const rest = new Promise<string>((resolve) => busy.once("data", (chunk) => resolve(String(chunk))));
    pending!.end(" done");
    expect(await rest).toContain("done");
    busy.destroy();
  });
});
