import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyRequest, onRequestAsyncHookHandler } from "fastify";
import { AppError } from "@mkt/runtime/errors";

const BEARER = /^Bearer[ ]+(\S+)\s*$/i;
const digest = (text: string) => createHash("sha256").update(text).digest();

/**
 * The onRequest hook of the /admin routes: `Authorization: Bearer $ADMIN_TOKEN`. Digests are
 * compared in constant time, so the comparison leaks neither the token nor its length.
 */
export function adminAuth(adminToken: string): onRequestAsyncHookHandler {
  const expected = digest(adminToken);
  return async (request: FastifyRequest) => {
    const match = BEARER.exec(request.headers.authorization ?? "");
    if (!match || !timingSafeEqual(digest(match[1]!), expected)) {
      throw new AppError("unauthenticated", "Admin endpoints need `Authorization: Bearer <ADMIN_TOKEN>`.");
    }
  };
}
