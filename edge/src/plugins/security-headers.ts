import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import helmet from "@fastify/helmet";

/**
 * Security headers on every response (issue 17 §4), from @fastify/helmet rather than by hand.
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

/** Registered first, so that answers refused by an earlier hook (401, 403) carry the headers too. */
export async function installSecurityHeaders(app: FastifyInstance): Promise<void> {
  await app.register(helmet, {
    // One policy for every response (API answers included): a JSON body opened in a tab is a
    // document too. No helmet defaults: they add `upgrade-insecure-requests`, which would break
    // the plain-HTTP local demo.
    contentSecurityPolicy: { useDefaults: false, directives: { ...CONTENT_SECURITY_POLICY } },
    frameguard: { action: "deny" },
    referrerPolicy: { policy: "no-referrer" },
    // Strict-Transport-Security belongs to the TLS terminator (Envoy); sent over plain HTTP on
    // localhost it would only confuse a browser.
    strictTransportSecurity: false,
    // The docs UI loads its own files only; cross-origin isolation would add nothing.
    crossOriginEmbedderPolicy: false,
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
