import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { randomBytes } from "node:crypto";
import { createLogger } from "@mkt/runtime/logger";
import { loadHosterServerConfig } from "../../../hoster-server/src/config.ts";
import { startHosterServer } from "../../../hoster-server/src/server.ts";

/**
 * The reference hoster server (hoster-server/), in this process; PORT 0 picks a free port. `env`
 * sets more of its configuration (DEMO_TOKENS_PER_SECOND for slow streams, for instance).
 */
export async function startRealHoster(
  options: { token?: string; models?: string[]; port?: number; env?: Record<string, string> } = {},
) {
  const token = options.token ?? `hoster-${randomBytes(12).toString("hex")}`;
  const server = await startHosterServer(
    loadHosterServerConfig({
      HOST: "127.0.0.1",
      PORT: String(options.port ?? 0),
      HOSTER_SERVER_TOKEN: token,
      DEMO_MODELS: (options.models ?? ["llama-3-8b.Q4_K_M.gguf"]).join(","),
      ...options.env,
    }),
    createLogger("hoster", "silent"),
  );
  return Object.assign(server, { token });
}

/**
 * A misbehaving hoster server: `answer` decides each response. It records every request, so a
 * test can tell that registration never called it.
 */
export async function startScriptedHoster(answer: (req: IncomingMessage, res: ServerResponse) => void) {
  const requests: Array<{ path: string; authorization: string | undefined }> = [];
  const server = createServer((req, res) => {
    requests.push({ path: req.url ?? "", authorization: req.headers.authorization });
    answer(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Answers like an OpenAI-compatible server: /health ok, /v1/models lists `models`. */
export function jsonAnswer(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

export const modelList = (ids: string[]) => ({ object: "list", data: ids.map((id) => ({ id, object: "model" })) });
