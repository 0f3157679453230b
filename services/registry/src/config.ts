import {
  bool,
  commonSpecs,
  ConfigError,
  host,
  intBetween,
  listenPort,
  loadConfig,
  makeValidator,
  millis,
  secret,
  secretsKey,
  str,
} from "@mkt/runtime/config";
import { tlsSpecs } from "@mkt/runtime/service-tls";
import { parseConfiguredModels, sharedName, type ConfiguredModel } from "./catalog/configured-models.ts";

const DEFAULT_LOCAL_MODELS = JSON.stringify([
  {
    model_id: "demo-small",
    model_alias: "Demo Small",
    context_window: 8192,
    input_price_per_1m_usd: "0.50",
    // Prompt tokens the demo's prefix cache served, at a tenth (as Anthropic and DeepSeek price them).
    cached_input_price_per_1m_usd: "0.05",
    output_price_per_1m_usd: "1.50",
    // The demo model answers any number of choices; 8 keeps a demo request's hold small.
    max_n: 8,
  },
  // Sized for coding agents, whose prompts run to tens of thousands of tokens and which expect a
  // context of 200,000: the edge's default MODEL_ALIASES send their model names here.
  {
    model_id: "demo-agent",
    model_alias: "Demo Agent",
    context_window: 200_000,
    input_price_per_1m_usd: "0.50",
    // Prompt tokens the demo's prefix cache served, at a tenth (as Anthropic and DeepSeek price them).
    cached_input_price_per_1m_usd: "0.05",
    output_price_per_1m_usd: "1.50",
    max_n: 8,
  },
  // Answers POST /v1/embeddings only (deterministic unit vectors), billed per input token.
  {
    model_id: "demo-embed",
    model_alias: "Demo Embed",
    kind: "embedding",
    context_window: 8192,
    input_price_per_1m_usd: "0.10",
    output_price_per_1m_usd: "0",
  },
]);

const configuredModels = makeValidator<ConfiguredModel[]>((value) => parseConfiguredModels(value));

/**
 * CLOUD_BASE_URL: an http(s) URL with no credentials, query or fragment (the key belongs in
 * CLOUD_API_KEY, never in a URL that could be logged). `/v1/chat/completions` is appended to it,
 * so a trailing `/v1`, as OpenAI SDKs write base URLs, is dropped. Messages never echo the value.
 */
const cloudBaseUrl = makeValidator<string>((value) => {
  let parsed: URL;
  try {
    parsed = new URL(value.trim());
  } catch {
    throw new Error("must be an http(s) URL such as https://api.openai.com/v1");
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new Error("must be an http(s) URL");
  if (parsed.username || parsed.password) throw new Error("must not hold credentials (the key goes in CLOUD_API_KEY)");
  if (parsed.search || parsed.hash) throw new Error("must not have a query or fragment");
  parsed.pathname = parsed.pathname.replace(/\/+$/, "").replace(/\/v1$/, "");
  return parsed.toString().replace(/\/+$/, "");
});

/** The cloud API is configured by all three CLOUD_* variables together, or not at all. */
const CLOUD_VARIABLES = ["CLOUD_BASE_URL", "CLOUD_API_KEY", "CLOUD_MODELS"] as const;
const cloudPart = {
  default: undefined,
  requiredWhen: (env: Record<string, unknown>) => CLOUD_VARIABLES.some((name) => env[name] !== undefined),
  desc: `required when any of ${CLOUD_VARIABLES.join(", ")} is set`,
};

/** Comma-separated http(s) URLs, at least one, no duplicates (messages never echo a value). */
const urlList = makeValidator<string[]>((value) => {
  const urls = value
    .split(",")
    .map((part) => part.trim())
    .filter(Boolean);
  if (urls.length === 0) throw new Error("must list at least one http(s) URL");
  for (const u of urls) {
    let parsed: URL;
    try {
      parsed = new URL(u);
    } catch {
      throw new Error("must be http(s) URLs separated by commas");
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new Error("must be http(s) URLs");
  }
  if (new Set(urls).size !== urls.length) throw new Error("must not list a URL twice");
  return urls;
});

export function loadRegistryConfig(env: NodeJS.ProcessEnv = process.env) {
  const config = loadConfig(
    {
      ...commonSpecs,
      ...tlsSpecs,
      GRPC_HOST: host({ default: "127.0.0.1" }),
      GRPC_PORT: listenPort({ default: 50053 }),
      // Plain HTTP on GRPC_HOST, no client certificate: GET /metrics, /healthz, /readyz (probes);
      // 0 picks a free port (tests).
      METRICS_PORT: listenPort({ default: 9464 }),
      ACCOUNTS_ADDR: str({ default: "127.0.0.1:50051" }),
      // Seals hosters' tokens at rest (AES-256-GCM). A secret: no default, never logged.
      SECRETS_KEY: secretsKey(),
      // Lets hoster endpoints be loopback or private addresses (registration checks and health
      // probes; the edge has its own setting for chats): tests and local demos only.
      ALLOW_PRIVATE_UPSTREAMS: bool({ default: false }),
      HOSTER_CHECK_TIMEOUT_MS: millis({ default: 5_000 }),
      HOSTER_PROBE_INTERVAL_MS: millis({ default: 30_000 }),
      HOSTER_UNHEALTHY_AFTER: intBetween(1, 1_000)({ default: 2 }),
      // How often every open endpoint is verified (docs/verification.md): a few small unbilled
      // calls per endpoint, each round started up to a tenth of the interval late at random.
      VERIFY_INTERVAL_MS: millis({ default: 600_000 }),
      // One URL, or several comma-separated (replicas serving every LOCAL_MODELS model, tried in
      // this order: a request fails over to the next before its first byte). Sent to the edges
      // in the routing table, with the token.
      LOCAL_MODEL_URL: urlList({ default: ["http://127.0.0.1:8090"] }),
      // A secret: no default, never logged.
      LOCAL_MODEL_TOKEN: secret(),
      LOCAL_MODELS: configuredModels({ default: parseConfiguredModels(DEFAULT_LOCAL_MODELS) }),
      // A cloud OpenAI-compatible API served as provider `cloud`; unset: no cloud models.
      CLOUD_BASE_URL: cloudBaseUrl(cloudPart),
      // A secret: no default, never logged, sent only to CLOUD_BASE_URL.
      CLOUD_API_KEY: secret(cloudPart),
      // Same format as LOCAL_MODELS; the prices are what customers pay.
      CLOUD_MODELS: configuredModels(cloudPart),
      // On SIGTERM, running WatchCatalog streams and calls get this long to finish.
      SHUTDOWN_GRACE_MS: intBetween(0, 600_000)({ default: 10_000 }),
    },
    env,
  );
  // Local and cloud models resolve in one namespace, so a name may belong to one of them only.
  const clash = config.CLOUD_MODELS && sharedName(config.LOCAL_MODELS, config.CLOUD_MODELS);
  if (clash) {
    throw new ConfigError(
      `invalid configuration:\n  CLOUD_MODELS: "${clash}" is already a model id or alias in LOCAL_MODELS`,
    );
  }
  return config;
}

export type RegistryConfig = ReturnType<typeof loadRegistryConfig>;
