import type { FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import { AuthenticateRequest, type Principal } from "@mkt/proto/accounts/v1/accounts";
import type { Backends } from "../backends.ts";
import type { PrincipalCache } from "../principal-cache.ts";

declare module "fastify" {
  interface FastifyRequest {
    /** Set by the API-key hook on authenticated routes. */
    principal: Principal | null;
  }
}

const BEARER = /^Bearer[ ]+(\S+)\s*$/i;

export interface ApiKeyAuthOptions {
  /** Scoped (subscription) keys may call chat, models and usage reads only (DESIGN.md §4). */
  allowScoped: boolean;
}

/** The current principal of an authenticated route. */
export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw new Error("route is missing the API-key hook");
  return request.principal;
}

/** Builds the onRequest hook (it runs before the body is read) that turns `Authorization: Bearer <key>` into `request.principal`. */
export function apiKeyAuth(backends: Backends, cache: PrincipalCache) {
  return ({ allowScoped }: ApiKeyAuthOptions): onRequestAsyncHookHandler =>
    async (request: FastifyRequest, _reply: FastifyReply) => {
      const match = BEARER.exec(request.headers.authorization ?? "");
      if (!match) {
        throw new AppError(
          "invalid_api_key",
          "Missing API key: send it as `Authorization: Bearer <key>`. Sign up with POST /v1/accounts.",
        );
      }
      const apiKey = match[1]!;
      const principal = await cache.get(apiKey, async () => {
        const { principal } = await backends.accounts.authenticate(AuthenticateRequest.fromPartial({ apiKey }), {
          timeoutMs: 5_000,
        });
        if (!principal) throw new AppError("invalid_api_key", "Invalid API key.");
        return principal;
      });
      if (principal.scope && !allowScoped) {
        throw new AppError("forbidden", "A subscription key may only call chat completions, models and usage.");
      }
      request.principal = principal;
    };
}
