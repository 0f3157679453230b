import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyRequest } from "fastify";
import { AppError } from "@mkt/runtime/errors";

const digest = (value: string) => createHash("sha256").update(value).digest();

/**
 * An onRequest hook requiring `Authorization: Bearer <token>`. Both sides are hashed first so the
 * comparison is constant-time whatever the lengths; the token never appears in an error.
 */
export function requireBearer(token: string): (request: FastifyRequest) => Promise<void> {
  const expected = digest(token);
  return async (request) => {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(request.headers.authorization ?? "");
    if (!match || !timingSafeEqual(digest(match[1]!), expected)) {
      throw new AppError("invalid_api_key", "Missing or invalid bearer token.", {
        headers: { "www-authenticate": "Bearer" },
      });
    }
  };
}
