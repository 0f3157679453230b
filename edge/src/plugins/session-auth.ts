import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import { ResolveSessionRequest, type Session } from "@mkt/proto/accounts/v1/accounts";
import type { Backends } from "../backends.ts";

declare module "fastify" {
  interface FastifyRequest {
    /** Set by the session hook on portal and hoster routes. */
    session: Session | null;
  }
}

/** The session cookie: HttpOnly, SameSite=Lax, Secure outside localhost. */
export const SESSION_COOKIE = "mk_session";

const UNSAFE_METHODS = new Set(["POST", "PUT", "PATCH", "DELETE"]);
const LOOPBACK_HOSTS = new Set(["localhost", "127.0.0.1", "[::1]", "::1"]);

/** Whether the request was made to this machine itself (a local demo over plain HTTP). */
function isLocal(request: FastifyRequest): boolean {
  return LOOPBACK_HOSTS.has(request.hostname);
}

export function setSessionCookie(request: FastifyRequest, reply: FastifyReply, token: string, expiresAt: string) {
  reply.setCookie(SESSION_COOKIE, token, {
    path: "/",
    httpOnly: true,
    sameSite: "lax",
    secure: !isLocal(request),
    expires: new Date(expiresAt),
  });
}

export function clearSessionCookie(request: FastifyRequest, reply: FastifyReply) {
  reply.clearCookie(SESSION_COOKIE, { path: "/", httpOnly: true, sameSite: "lax", secure: !isLocal(request) });
}

/**
 * Cookies ride along on cross-site requests a browser is tricked into making, so a
 * state-changing request carrying the session cookie must come from a page of this site: a
 * foreign `Origin` is refused (SameSite=Lax already stops most of them; this also covers older
 * browsers and same-site subdomains), and so is a request without `Origin` whose
 * `Sec-Fetch-Site` says another site made it. It runs for every route, so login, logout, the
 * customer routes that take the cookie (keys, subscriptions) and any later cookie route are
 * covered without each remembering to ask. A client that sends neither header is not a browser,
 * and cannot be made to carry someone's cookie.
 */
export function installCsrfGuard(app: FastifyInstance): void {
  app.addHook("onRequest", async (request) => {
    if (request.cookies[SESSION_COOKIE] !== undefined) refuseCrossSite(request);
  });
}

const SAME_SITE_FETCHES = new Set(["same-origin", "none"]);

function refuseCrossSite(request: FastifyRequest): void {
  if (!UNSAFE_METHODS.has(request.method)) return;
  const origin = request.headers.origin;
  if (origin === undefined) {
    const fetchSite = request.headers["sec-fetch-site"];
    if (typeof fetchSite === "string" && !SAME_SITE_FETCHES.has(fetchSite)) {
      throw new AppError("forbidden", "Cross-site request refused: it was not made by a page of this site.");
    }
    return;
  }
  let host: string;
  try {
    host = new URL(origin).host;
  } catch {
    host = "";
  }
  if (host !== request.host) {
    throw new AppError("forbidden", "Cross-site request refused: the Origin is not this site.");
  }
}

export function principalSession(request: FastifyRequest): Session {
  if (!request.session) throw new Error("route is missing the session hook");
  return request.session;
}

/** Which logins a route accepts. */
export type SessionKind = "customer" | "hoster" | "any";

/** Builds the onRequest hook that turns the session cookie into `request.session` of one kind. */
export function sessionAuth(backends: Backends) {
  return (kind: SessionKind): onRequestAsyncHookHandler =>
    async (request: FastifyRequest) => {
      const token = request.cookies[SESSION_COOKIE];
      if (!token)
        throw new AppError("unauthenticated", `Log in first (POST /${kind === "hoster" ? "hosters" : "auth"}/login).`);
      const { session } = await backends.accounts.resolveSession(
        ResolveSessionRequest.fromPartial({ sessionToken: token }),
      );
      if (!session || (kind !== "any" && session.kind !== kind)) {
        throw new AppError(
          "forbidden",
          kind === "hoster" ? "This needs a hoster session." : "This needs a customer session.",
        );
      }
      request.session = session;
    };
}
