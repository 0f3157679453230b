import type { FastifyInstance, FastifyReply } from "fastify";
import { Pool, type Dispatcher } from "undici";
import { AppError } from "@mkt/runtime/errors";
import type { ShutdownSignals } from "../shutdown-signals.ts";

export interface ProxyOptions {
  /** The backend's root (`http://host:11434`); a trailing `/v1` is accepted too. */
  upstreamUrl: string;
  /** Sent to the backend as its bearer token; our callers' token is never forwarded. */
  upstreamApiKey: string | undefined;
  shutdown: ShutdownSignals;
}

/** Response headers worth relaying; hop-by-hop and length headers are the server's own business. */
const RELAYED_HEADERS = ["content-type", "cache-control", "x-request-id"];

function relay(reply: FastifyReply, upstream: Dispatcher.ResponseData): FastifyReply {
  reply.code(upstream.statusCode);
  for (const name of RELAYED_HEADERS) {
    const value = upstream.headers[name];
    if (value !== undefined) reply.header(name, value);
  }
  if (upstream.headers["content-type"]?.toString().startsWith("text/event-stream")) {
    reply.header("x-accel-buffering", "no");
  }
  // Fastify pipes the body and destroys it when the client disconnects, which aborts the
  // upstream request: a backend never keeps generating for nobody.
  return reply.send(upstream.body);
}

/**
 * Proxy mode: /v1/models, /v1/chat/completions and /v1/embeddings are forwarded to an OpenAI-compatible backend
 * (Ollama, llama.cpp server, vLLM). Response bytes, streamed or not, pass through untouched, except
 * the backend's 401/403 (it refused our UPSTREAM_API_KEY) and 5xx, which become 502 upstream_error.
 */
export function proxyRoutes(app: FastifyInstance, options: ProxyOptions): void {
  const base = new URL(options.upstreamUrl);
  const prefix = base.pathname.replace(/\/+$/, "").replace(/\/v1$/, "");
  const pool = new Pool(base.origin, { connectTimeout: 10_000 });
  app.addHook("onClose", async () => {
    await pool.destroy();
  });
  const auth = options.upstreamApiKey ? { authorization: `Bearer ${options.upstreamApiKey}` } : {};

  const forward = async (
    reply: FastifyReply,
    request: Omit<Dispatcher.RequestOptions, "origin" | "signal">,
  ): Promise<FastifyReply> => {
    const gone = new AbortController();
    reply.raw.once("close", () => gone.abort());
    let upstream: Dispatcher.ResponseData;
    try {
      upstream = await pool.request({ ...request, signal: AbortSignal.any([gone.signal, options.shutdown.cut]) });
    } catch (err) {
      if (gone.signal.aborted) return reply.hijack(); // nobody to answer
      reply.log.warn({ err, upstream: base.origin }, "upstream request failed");
      const code = (err as { code?: string }).code ?? "";
      if (code.endsWith("_TIMEOUT")) throw new AppError("upstream_timeout", "The model backend timed out.");
      throw new AppError("upstream_error", "The model backend could not be reached.");
    }
    if (upstream.statusCode === 401 || upstream.statusCode === 403) {
      // The caller's token was fine; it is ours the backend refused. Passing its 401 on would tell
      // the gateway that the gateway's key is wrong.
      await upstream.body.dump().catch(() => undefined);
      reply.log.error({ status: upstream.statusCode, upstream: base.origin }, "backend refused UPSTREAM_API_KEY");
      throw new AppError("upstream_error", "The model backend refused this server's credentials.");
    }
    if (upstream.statusCode >= 500) {
      // A backend's 5xx body is its own business (Ollama sends `{"error": "<text>"}`, some servers
      // a stack trace): callers get an OpenAI-shaped 502 that echoes none of it.
      await upstream.body.dump().catch(() => undefined);
      reply.log.warn({ status: upstream.statusCode, upstream: base.origin }, "upstream answered with a server error");
      throw new AppError("upstream_error", "The model backend failed to answer.");
    }
    return relay(reply, upstream);
  };

  app.get("/v1/models", (_request, reply) =>
    forward(reply, { method: "GET", path: `${prefix}/v1/models`, headers: { accept: "application/json", ...auth } }),
  );

  // Embeddings (optional in the hoster contract) are forwarded the same way: a backend without
  // them answers its own 404, which reaches the gateway as it is.
  for (const path of ["/v1/chat/completions", "/v1/embeddings"]) {
    app.post(path, async (request, reply) => {
      const body = request.body;
      if (typeof body !== "object" || body === null || Array.isArray(body)) {
        throw new AppError("invalid_request", "The request body must be a JSON object.", { param: "body" });
      }
      return forward(reply, {
        method: "POST",
        path: `${prefix}${path}`,
        headers: {
          "content-type": "application/json",
          accept: request.headers.accept ?? "application/json, text/event-stream",
          ...auth,
        },
        body: JSON.stringify(body),
      });
    });
  }
}
