import type { FastifyInstance } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import { object, replies, string } from "./response-schemas.ts";

export interface Readiness {
  /** Resolves when the edge can serve: not shutting down, backends connected, NATS up. */
  check(): Promise<void>;
}

/** GET /healthz (the process is alive) and GET /readyz (it can serve traffic now). */
export function healthRoutes(app: FastifyInstance, readiness: Readiness): void {
  const status = replies(200, object({ status: string() }));
  app.get("/healthz", { schema: { hide: true, response: status } }, async () => ({ status: "ok" }));
  app.get("/readyz", { schema: { hide: true, response: status } }, async () => {
    try {
      await readiness.check();
    } catch (err) {
      throw new AppError("service_unavailable", `Not ready: ${(err as Error).message}`);
    }
    return { status: "ready" };
  });
}
