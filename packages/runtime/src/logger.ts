import { pino, type Logger } from "pino";

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

/** The process logger: JSON lines on stdout, secrets redacted. */
export function createLogger(name: string, level = "info"): Logger {
  return pino({ name, level, redact: { paths: REDACTED_PATHS, censor: "[redacted]" } });
}
