import { commonSpecs, host, listenPort, loadConfig, makeValidator, secret, str, url } from "@mkt/runtime/config";

/** Comma-separated model ids, e.g. "demo-small,demo-large". */
const modelList = makeValidator<string[]>((value) => {
  const ids = value
    .split(",")
    .map((id) => id.trim())
    .filter((id) => id !== "");
  if (ids.length === 0) throw new Error("must name at least one model id");
  return [...new Set(ids)];
});

const nonNegativeNumber = makeValidator<number>((value) => {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) throw new Error("must be a number ≥ 0 (0 = no delay)");
  return n;
});

const tokenCount = makeValidator<number>((value) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 100_000) throw new Error("must be an integer from 1 to 100000");
  return n;
});

/**
 * The reference hoster server's settings. With UPSTREAM_URL set it proxies to that
 * OpenAI-compatible backend; otherwise it serves the built-in deterministic demo model.
 */
export function loadHosterServerConfig(env: NodeJS.ProcessEnv = process.env) {
  return loadConfig(
    {
      LOG_LEVEL: commonSpecs.LOG_LEVEL,
      HOST: host({ default: "127.0.0.1" }),
      PORT: listenPort({ default: 8090 }),
      // A secret: no default, never logged.
      HOSTER_SERVER_TOKEN: secret(),
      DEMO_MODELS: modelList({ default: ["demo-small", "demo-agent", "demo-embed"] }),
      DEMO_TOKENS_PER_SECOND: nonNegativeNumber({ default: 0 }),
      DEMO_COMPLETION_TOKENS: tokenCount({ default: 24 }),
      UPSTREAM_URL: url({ default: undefined }),
      UPSTREAM_API_KEY: str({ default: undefined }),
    },
    env,
  );
}

export type HosterServerConfig = ReturnType<typeof loadHosterServerConfig>;
