import type { FastifyInstance } from "fastify";
import { AppError } from "@mkt/runtime/errors";

export interface Readiness {
  /** Resolves when the edge can serve: not shutting down, backends connected, NATS up. */
  check(): Promise<void>;
}

/** GET /healthz (the process is alive) and GET /readyz (it can serve traffic now). */
export function healthRoutes(app: FastifyInstance, readiness: Readiness): void {
  const hide = { hide: true };
  app.get("/healthz", { schema: hide }, async () => ({ status: "ok" }));
  app.get("/readyz", { schema: hide }, async () => {
    try {
      await readiness.check();
    } catch (err) {
      throw new AppError("service_unavailable", `Not ready: ${(err as Error).message}`);
    }
    return { status: "ready" };
  });
}
