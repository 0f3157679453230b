import type { FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import { AuthenticateRequest, ResolveSessionRequest, type Principal } from "@mkt/proto/accounts/v1/accounts";
import type { Backends } from "../backends.ts";
import type { PrincipalCache } from "../principal-cache.ts";
import { SESSION_COOKIE } from "./session-auth.ts";

declare module "fastify" {
  interface FastifyRequest {
    /** Set by the API-key hook on authenticated routes. */
    principal: Principal | null;
  }
}

const BEARER = /^Bearer[ ]+(\S+)\s*$/i;

export interface ApiKeyAuthOptions {
  /** Scoped (subscription) keys may call chat, models and usage reads only. */
  allowScoped: boolean;
  /**
   * A customer route the portal calls (docs/portal.md#how-it-talks-to-the-api): without an
   * `Authorization` header, the customer session cookie stands for the account. Chat never takes
   * it: the playground uses a session key, so every chat request is a key's.
   */
  acceptSession?: boolean;
  /** Anthropic's clients send the key as `x-api-key` (or as a Bearer token, given an auth token). */
  acceptXApiKey?: boolean;
}

/** The current principal of an authenticated route. */
export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw new Error("route is missing the API-key hook");
  return request.principal;
}

/**
 * Whose usage the caller may read: its account, or for a scoped key only its subscription's
 * requests (least privilege; billing filters on it).
 */
export function usageOwnerOf(request: FastifyRequest): { accountId: string; subscriptionId?: string } {
  const principal = principalOf(request);
  const subscriptionId = principal.scope?.subscriptionId;
  return subscriptionId ? { accountId: principal.accountId, subscriptionId } : { accountId: principal.accountId };
}

/**
 * Builds the onRequest hook (it runs before the body is read) that turns `Authorization: Bearer
 * <key>` (or, where allowed, `x-api-key: <key>`) into `request.principal`.
 */
export function apiKeyAuth(backends: Backends, cache: PrincipalCache) {
  return ({
      allowScoped,
      acceptSession = false,
      acceptXApiKey = false,
    }: ApiKeyAuthOptions): onRequestAsyncHookHandler =>
    async (request: FastifyRequest, _reply: FastifyReply) => {
      const sessionToken = request.cookies[SESSION_COOKIE];
      if (acceptSession && request.headers.authorization === undefined && sessionToken !== undefined) {
        request.principal = await sessionPrincipal(backends, sessionToken);
        return;
      }
      const match = BEARER.exec(request.headers.authorization ?? "");
      const xApiKey = acceptXApiKey ? request.headers["x-api-key"] : undefined;
      const apiKey = match?.[1] ?? (typeof xApiKey === "string" && xApiKey.trim() !== "" ? xApiKey.trim() : undefined);
      if (!apiKey) {
        const how = acceptXApiKey
          ? "`x-api-key: <key>` or `Authorization: Bearer <key>`"
          : "`Authorization: Bearer <key>`";
        throw new AppError("invalid_api_key", `Missing API key: send it as ${how}. Sign up with POST /v1/accounts.`);
      }
      const principal = await cache.get(apiKey, async () => {
        const { principal, principalTtlMs } = await backends.accounts.authenticate(
          AuthenticateRequest.fromPartial({ apiKey, edgeId: cache.edgeId }),
          {
            timeoutMs: 5_000,
          },
        );
        if (!principal) throw new AppError("invalid_api_key", "Invalid API key.");
        cache.trustFor(Number(principalTtlMs));
        return principal;
      });
      if (principal.scope && !allowScoped) {
        throw new AppError("forbidden", "A subscription key may only call chat completions, models and usage.");
      }
      request.principal = principal;
    };
}

/** Whom a customer session cookie acts as (no key: `key_id` is empty). */
async function sessionPrincipal(backends: Backends, sessionToken: string): Promise<Principal> {
  const { principal } = await backends.accounts.resolveSession(ResolveSessionRequest.fromPartial({ sessionToken }), {
    timeoutMs: 5_000,
  });
  if (!principal) throw new AppError("forbidden", "This needs a customer session or an API key.");
  return principal;
}
