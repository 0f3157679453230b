import { pino, type Logger } from "pino";
import { traceLogFields } from "./trace-context.ts";

export type { Logger };

/**
 * Paths that may hold secrets. pino replaces them before a line is written, so a key, token or
 * password that slips into a logged object still never reaches the log.
 */
export const REDACTED_PATHS = [
  "api_key",
  "apiKey",
  "password",
  "token",
  "authorization",
  "*.api_key",
  "*.apiKey",
  "*.password",
  "*.token",
  "*.authorization",
  "req.headers.authorization",
  "req.headers.cookie",
  'res.headers["set-cookie"]',
];

/**
 * The process logger: JSON lines on stdout, secrets redacted, and inside a traced operation the
 * `trace_id` and `span_id` that find its trace (none when tracing is off).
 */
export function createLogger(name: string, level = "info"): Logger {
  return pino({ name, level, redact: { paths: REDACTED_PATHS, censor: "[redacted]" }, mixin: traceLogFields });
}
