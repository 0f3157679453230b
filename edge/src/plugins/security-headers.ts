import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { IncomingMessage, ServerResponse } from "node:http";
import helmet, { type HelmetOptions } from "helmet";

/**
 * Security headers on every response, computed by helmet rather than by hand.
 * The CSP is strict: no inline script anywhere, scripts and styles only from this origin, no
 * framing (`frame-ancestors 'none'` plus `X-Frame-Options: DENY` for older browsers). `/docs`
 * still renders because @fastify/swagger-ui serves its initializer as a file (`staticCSP`); the
 * UI's own inline `style` attributes need `style-src 'unsafe-inline'`, which cannot run code.
 * uPlot in the portal also sets inline styles, hence the same allowance there.
 */
export const CONTENT_SECURITY_POLICY = {
  "default-src": ["'self'"],
  "base-uri": ["'self'"],
  "connect-src": ["'self'"],
  "font-src": ["'self'"],
  "form-action": ["'self'"],
  "frame-ancestors": ["'none'"],
  "img-src": ["'self'", "data:"],
  "object-src": ["'none'"],
  "script-src": ["'self'"],
  "script-src-attr": ["'none'"],
  "style-src": ["'self'", "'unsafe-inline'"],
} as const;

/** Helmet's options: one policy for every response. */
const HELMET_OPTIONS: HelmetOptions = {
  // API answers included: a JSON body opened in a tab is a document too. No helmet defaults: they
  // add `upgrade-insecure-requests`, which would break the plain-HTTP local demo.
  contentSecurityPolicy: { useDefaults: false, directives: { ...CONTENT_SECURITY_POLICY } },
  frameguard: { action: "deny" },
  referrerPolicy: { policy: "no-referrer" },
  // Strict-Transport-Security belongs to the TLS terminator (Envoy); sent over plain HTTP on
  // localhost it would only confuse a browser.
  strictTransportSecurity: false,
  // The docs UI loads its own files only; cross-origin isolation would add nothing.
  crossOriginEmbedderPolicy: false,
};

/**
 * The headers helmet sets for these options. They are the same on every response (no nonces,
 * no per-request directives), so helmet runs once, at start, against a recorder: building its
 * middleware per request, as @fastify/helmet does, parsed the CSP on every chat request.
 */
export function securityHeaders(options: HelmetOptions = HELMET_OPTIONS): Record<string, string> {
  const headers: Record<string, string> = {};
  const recorder = {
    setHeader(name: string, value: string | number | readonly string[]) {
      headers[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : String(value);
    },
    removeHeader() {},
  };
  helmet(options)({} as IncomingMessage, recorder as unknown as ServerResponse, (err?: unknown) => {
    if (err) throw err;
  });
  return headers;
}

/** Registered first, so that answers refused by an earlier hook (401, 403) carry the headers too. */
export function installSecurityHeaders(app: FastifyInstance): void {
  const headers = securityHeaders();
  app.addHook("onRequest", (_request, reply, done) => {
    reply.headers(headers);
    done();
  });
}

/**
 * onRequest hook of the routes whose answer carries a secret shown once (a new API key, a
 * generated password, a session cookie): no browser cache, history or proxy may keep it. Set
 * before anything else runs, so an error answer carries it too.
 */
export async function noStore(_request: FastifyRequest, reply: FastifyReply): Promise<void> {
  reply.header("cache-control", "no-store");
}
