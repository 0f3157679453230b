import { existsSync } from "node:fs";
import { join } from "node:path";
import type { FastifyInstance, FastifyReply } from "fastify";
import fastifyStatic from "@fastify/static";
import { AppError } from "@mkt/runtime/errors";

/** Vite names every asset by its content hash, so a cached copy can never be stale. */
const IMMUTABLE = "public, max-age=31536000, immutable";
/** The page itself is checked on every visit, so a new build reaches people at once. */
const REVALIDATE = "no-cache";

/**
 * The web portal (docs/portal.md) as static files under /portal: hashed assets cached for a year,
 * `index.html` revalidated every time, and any other /portal path answered with `index.html` so
 * the page's own router picks it up (a reload on /portal/keys works). The portal is a client of
 * the public API like any other; nothing here knows what its pages do.
 */
export async function servePortal(app: FastifyInstance, dir: string): Promise<void> {
  const index = join(dir, "index.html");
  if (!existsSync(index)) {
    app.log.warn({ dir }, "the portal is not built (npm run build -w @mkt/portal); /portal answers 503");
    app.get("/portal/*", async () => {
      throw new AppError("service_unavailable", "The portal is not built on this server.");
    });
    return;
  }
  await app.register(fastifyStatic, {
    root: dir,
    prefix: "/portal/",
    index: false,
    wildcard: false,
    decorateReply: true,
    cacheControl: false,
    setHeaders(res, path) {
      res.header("cache-control", path.includes("/assets/") ? IMMUTABLE : REVALIDATE);
    },
  });
  const sendIndex = (_: unknown, reply: FastifyReply) =>
    reply.header("cache-control", REVALIDATE).sendFile("index.html", dir, { cacheControl: false });
  app.get("/portal", { schema: { hide: true } }, (_, reply) => reply.redirect("/portal/", 308));
  app.get("/portal/", { schema: { hide: true } }, sendIndex);
  // A missing hashed file is a 404, never the page (a stale tab must not run HTML as script).
  app.get("/portal/assets/*", { schema: { hide: true } }, async () => {
    throw new AppError("not_found", "No such file.");
  });
  app.get("/portal/*", { schema: { hide: true } }, sendIndex);
}
