import { cleanEnv, str, port, bool, num, url, host, makeValidator, type CleanedEnv } from "envalid";
import { parseSecretsKey } from "./secret-box.ts";

export { str, port, bool, num, url, host, makeValidator };

/**
 * Parses and validates a process's environment once, at start. An invalid or missing variable
 * stops the process with a message naming it; secrets have no defaults.
 */
export function loadConfig<S extends object>(specs: S, env: NodeJS.ProcessEnv = process.env): CleanedEnv<S> {
  return cleanEnv(env, specs as never, {
    reporter: ({ errors }) => {
      const names = Object.keys(errors);
      if (names.length === 0) return;
      const lines = names.map((name) => `  ${name}: ${(errors as Record<string, Error>)[name]!.message}`);
      throw new ConfigError(`invalid configuration:\n${lines.join("\n")}`);
    },
  }) as CleanedEnv<S>;
}

export class ConfigError extends Error {
  override name = "ConfigError";
}

/** Settings every backend process shares. */
export const commonSpecs = {
  LOG_LEVEL: str({ default: "info", choices: ["fatal", "error", "warn", "info", "debug", "trace", "silent"] }),
  DATABASE_URL: url({ default: "postgres://postgres@127.0.0.1:5432/marketplace" }),
  NATS_URL: str({ default: "nats://127.0.0.1:4222" }),
  /** Prefix for NATS subjects and stream names, so test runs and tenants do not collide. */
  EVENTS_PREFIX: str({ default: "" }),
  /** Run pending migrations at start (under an advisory lock, safe with several replicas). */
  MIGRATE_ON_START: bool({ default: true }),
};

/**
 * `SECRETS_KEY`, the key of the services' SecretBox: 64 hex characters, exactly what `npm start`
 * generates (secret-box.ts). Required wherever it is used: no default, never logged.
 */
export const secretsKey = makeValidator<string>((value) => {
  parseSecretsKey(value);
  return value.trim();
});

/** An integer within [min, max]. */
export const intBetween = (min: number, max: number) =>
  makeValidator<number>((value) => {
    const n = Number(value);
    if (!Number.isSafeInteger(n) || n < min || n > max) throw new Error(`must be an integer from ${min} to ${max}`);
    return n;
  });

/** A TCP port to listen on; unlike envalid's `port`, 0 is allowed (the OS picks a free one, as tests do). */
export const listenPort = intBetween(0, 65535);

/** A required secret: no default, never empty. */
export const secret = makeValidator<string>((value) => {
  if (value.trim() === "") throw new Error("must not be empty");
  return value;
});
