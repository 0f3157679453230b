import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import {
  CreateSessionKeyRequest,
  LoginRequest,
  LogoutRequest,
  ResolveSessionRequest,
} from "@mkt/proto/accounts/v1/accounts";
import { clearSessionCookie, SESSION_COOKIE, setSessionCookie } from "../plugins/session-auth.ts";
import { keyProperties, renderKey } from "./keys.ts";
import type { RouteDeps } from "./route-deps.ts";
import { noStore } from "../plugins/security-headers.ts";
import { boolean, nullableString, object, replies, string } from "./response-schemas.ts";

interface LoginBody {
  email: string;
  password: string;
  kind?: "customer" | "hoster";
}

const credentials = {
  type: "object",
  required: ["email", "password"],
  additionalProperties: false,
  properties: {
    email: { type: "string", maxLength: 254 },
    password: { type: "string", maxLength: 1024 },
  },
} as const;

/**
 * Session logins for the portal and the hoster endpoints. Every login issues a
 * new token (the session id rotates; a session presented with the login is ended), and logout
 * ends the session server-side, so a copied cookie stops working too.
 */
export function sessionRoutes(app: FastifyInstance, deps: RouteDeps): void {
  async function login(request: FastifyRequest, reply: FastifyReply, body: LoginBody) {
    const kind = body.kind ?? "customer";
    const { sessionToken, session } = await deps.backends.accounts.login(
      LoginRequest.fromPartial({ email: body.email, password: body.password, kind, clientIp: request.ip }),
    );
    const previous = request.cookies[SESSION_COOKIE];
    if (previous) await deps.backends.accounts.logout(LogoutRequest.fromPartial({ sessionToken: previous }));
    setSessionCookie(request, reply, sessionToken, session!.expiresAt);
    return {
      kind,
      ...(kind === "hoster" ? { hoster_id: session!.subjectId } : { account_id: session!.subjectId }),
      email: session!.email,
      expires_at: session!.expiresAt,
    };
  }

  async function logout(request: FastifyRequest, reply: FastifyReply) {
    const token = request.cookies[SESSION_COOKIE];
    if (token) await deps.backends.accounts.logout(LogoutRequest.fromPartial({ sessionToken: token }));
    clearSessionCookie(request, reply);
    return { logged_out: true };
  }

  /** A login's answer: who is now logged in (the session itself travels in the cookie). */
  const loggedIn = object({
    kind: string("`customer` or `hoster`"),
    account_id: string("A customer's"),
    hoster_id: string("A hoster's"),
    email: string(),
    expires_at: string(),
  });

  app.post<{ Body: LoginBody }>(
    "/auth/login",
    {
      onRequest: noStore,
      schema: {
        summary: "Log in (customer by default, or `kind: hoster`); sets the mk_session cookie",
        response: replies(200, loggedIn),
        tags: ["sessions"],
        body: {
          ...credentials,
          properties: { ...credentials.properties, kind: { type: "string", enum: ["customer", "hoster"] } },
        },
      },
    },
    (request, reply) => login(request, reply, request.body),
  );
  app.post<{ Body: LoginBody }>(
    "/hosters/login",
    {
      onRequest: noStore,
      schema: {
        summary: "Hoster login; sets the mk_session cookie",
        response: replies(200, loggedIn),
        tags: ["hosters"],
        body: credentials,
      },
    },
    (request, reply) => login(request, reply, { ...request.body, kind: "hoster" }),
  );
  // Who is logged in, nobody included: the portal asks on every first page, and a logged-out
  // visitor is an answer, not an error (a 401 here would be a console error in every browser).
  // A cookie whose session has ended counts as nobody; routes that need a session still answer 401.
  app.get(
    "/auth/session",
    {
      schema: {
        summary: "Who is logged in: the session, or nulls when nobody is",
        response: replies(
          200,
          object({
            kind: nullableString("`customer` or `hoster`; null when nobody is logged in"),
            subject_id: nullableString("The account's or hoster's id"),
            email: nullableString(),
            expires_at: nullableString(),
          }),
        ),
        tags: ["sessions"],
      },
    },
    async (request) => {
      const token = request.cookies[SESSION_COOKIE];
      const session = token ? await liveSession(token) : undefined;
      if (!session) return { kind: null, subject_id: null, email: null, expires_at: null };
      return { kind: session.kind, subject_id: session.subjectId, email: session.email, expires_at: session.expiresAt };
    },
  );

  /** The session a cookie token stands for, or undefined when it has ended or never existed. */
  async function liveSession(token: string) {
    try {
      return (await deps.backends.accounts.resolveSession(ResolveSessionRequest.fromPartial({ sessionToken: token })))
        .session;
    } catch (err) {
      if (err instanceof AppError && err.code === "unauthenticated") return undefined;
      throw err;
    }
  }
  app.post(
    "/auth/session-key",
    {
      onRequest: [noStore, deps.session("customer")],
      schema: {
        summary:
          "A short-lived API key for this login session (the portal's playground): it expires with the session and is revoked at logout",
        tags: ["sessions"],
        response: replies(201, object({ ...keyProperties, api_key: string("The key's secret, shown only here") })),
      },
    },
    async (request, reply) => {
      const created = await deps.backends.accounts.createSessionKey(
        CreateSessionKeyRequest.fromPartial({ sessionToken: request.cookies[SESSION_COOKIE] }),
      );
      return reply.code(201).send({ ...renderKey(created.key), api_key: created.apiKey });
    },
  );
  for (const path of ["/auth/logout", "/hosters/logout"]) {
    app.post(
      path,
      {
        schema: {
          summary: "End the session and clear its cookie",
          response: replies(200, object({ logged_out: boolean() })),
          tags: ["sessions"],
        },
      },
      logout,
    );
  }
}
