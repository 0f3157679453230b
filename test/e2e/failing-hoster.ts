import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { startRealHoster } from "../../services/registry/test/hoster-servers.ts";

/** What a failing hoster's proxy counts: chat requests seen, and whether it fails them now. */
export interface FailureState {
  failing: boolean;
  chats: number;
}

/**
 * A real hoster-server serving `modelId` behind a proxy that answers a chat request 500 (before
 * any byte, as an overloaded server does) when `fails(state)` says so, and passes everything else
 * through. `state.chats` counts the chat requests that reached the proxy; a test flips
 * `state.failing` to take the hoster out and bring it back.
 */
export async function failingHoster(modelId: string, fails: (state: FailureState) => boolean, failing = false) {
  const real = await startRealHoster({ models: [modelId] });
  const state: FailureState = { failing, chats: 0 };
  const server = createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      if (req.url?.endsWith("/chat/completions")) {
        const fail = fails(state);
        state.chats++;
        if (fail) {
          res.writeHead(500, { "content-type": "application/json" }).end('{"error":{"message":"overloaded"}}');
          return;
        }
      }
      const upstream = await fetch(`${real.url}${req.url}`, {
        method: req.method,
        headers: { authorization: req.headers.authorization ?? "", "content-type": "application/json" },
        body: req.method === "GET" ? undefined : Buffer.concat(chunks),
      });
      res.writeHead(upstream.status, { "content-type": upstream.headers.get("content-type") ?? "application/json" });
      for await (const chunk of upstream.body ?? []) res.write(chunk);
      res.end();
    })().catch(() => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    state,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    token: real.token,
    close: async () => {
      await new Promise((resolve) => server.close(resolve));
      await real.close();
    },
  };
}
