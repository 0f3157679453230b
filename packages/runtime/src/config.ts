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

/** A required secret: no default, never empty. */
export const secret = makeValidator<string>((value) => {
  if (value.trim() === "") throw new Error("must not be empty");
  return value;
});

/** A NATS user name: it is also a subject token (its inbox prefix, nats-permissions.ts). */
const natsUser = makeValidator<string>((value) => {
  if (!/^[A-Za-z0-9_-]+$/.test(value)) throw new Error("must be letters, digits, _ or - (e.g. edge, billing)");
  return value;
});

/**
 * A NATS password: a letter, then 15 or more letters, digits or _ (`n$(openssl rand -hex 24)`).
 * The nats-server reads it from its environment as a configuration value, so anything else could
 * be read as a number, a variable or a syntax error there (docs/deploy.md, "NATS users"). A
 * secret: never echoed, never logged.
 */
const natsPassword = makeValidator<string>((value) => {
  if (!/^[A-Za-z][A-Za-z0-9_]{15,}$/.test(value)) {
    throw new Error("must be a letter then at least 15 letters, digits or _ (e.g. n$(openssl rand -hex 24))");
  }
  return value;
});

/**
 * A PostgreSQL URL (`postgres://ROLE:PASSWORD@host:5432/database`). It carries a password, so
 * unlike envalid's `url` a message never echoes it.
 */
export const postgresUrl = makeValidator<string>((value) => {
  let parsed: URL;
  try {
    parsed = new URL(value);
  } catch {
    throw new Error("must be a URL such as postgres://ROLE:PASSWORD@host:5432/marketplace");
  }
  if (parsed.protocol !== "postgres:" && parsed.protocol !== "postgresql:") {
    throw new Error("must be a postgres:// URL");
  }
  if (parsed.pathname.length < 2) throw new Error("must name the database (…:5432/marketplace)");
  return value;
});

/** NATS_USER and NATS_PASSWORD come together, or not at all (a NATS without authentication). */
const natsCredential = {
  default: undefined,
  requiredWhen: (env: Record<string, unknown>) => env.NATS_USER !== undefined || env.NATS_PASSWORD !== undefined,
  desc: "required when NATS_USER or NATS_PASSWORD is set",
};

/** Settings every backend process shares. */
export const commonSpecs = {
  LOG_LEVEL: str({ default: "info", choices: ["fatal", "error", "warn", "info", "debug", "trace", "silent"] }),
  /**
   * The service's runtime role (docs/deploy.md, "Database roles"): rows of its own schema's
   * tables, nothing else. The password is a secret: never logged.
   */
  DATABASE_URL: postgresUrl({ default: "postgres://postgres@127.0.0.1:5432/marketplace" }),
  /**
   * The owner of the service's schema, which runs the migrations (MIGRATE_ON_START); unset: the
   * DATABASE_URL role migrates too (one administrator URL, as tests may use).
   */
  MIGRATE_DATABASE_URL: postgresUrl({ default: undefined }),
  NATS_URL: str({ default: "nats://127.0.0.1:4222" }),
  /**
   * This service's NATS user and password (docs/deploy.md, "NATS users"); unset for a NATS
   * without authentication (npm start, tests). The password is a secret: no default, never logged.
   */
  NATS_USER: natsUser(natsCredential),
  NATS_PASSWORD: natsPassword(natsCredential),
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

/** A finite decimal number within [min, max] (a ratio, for instance). */
export const numberBetween = (min: number, max: number) =>
  makeValidator<number>((value) => {
    const n = value.trim() === "" ? Number.NaN : Number(value);
    if (!Number.isFinite(n) || n < min || n > max) throw new Error(`must be a number from ${min} to ${max}`);
    return n;
  });

/** A TCP port to listen on; unlike envalid's `port`, 0 is allowed (the OS picks a free one, as tests do). */
export const listenPort = intBetween(0, 65535);

/** A positive whole number of milliseconds. */
export const millis = makeValidator<number>((value) => {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n <= 0) throw new Error("must be a positive integer (milliseconds)");
  return n;
});
