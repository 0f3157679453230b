import {
  bool,
  commonSpecs,
  host,
  intBetween,
  listenPort,
  loadConfig,
  makeValidator,
  secret,
  secretsKey,
  str,
  url,
} from "@mkt/runtime/config";
import { parseLocalModels, type LocalModel } from "./catalog/local-models.ts";

const DEFAULT_LOCAL_MODELS = JSON.stringify([
  {
    model_id: "demo-small",
    model_alias: "Demo Small",
    context_window: 8192,
    input_price_per_1m_usd: "0.50",
    output_price_per_1m_usd: "1.50",
  },
]);

const localModels = makeValidator<LocalModel[]>((value) => parseLocalModels(value));

/** A positive whole number of milliseconds. */
const millis = makeValidator<number>((value) => {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n <= 0) throw new Error("must be a positive integer (milliseconds)");
  return n;
});

export function loadRegistryConfig(env: NodeJS.ProcessEnv = process.env) {
  return loadConfig(
    {
      ...commonSpecs,
      GRPC_HOST: host({ default: "127.0.0.1" }),
      GRPC_PORT: listenPort({ default: 50053 }),
      BILLING_ADDR: str({ default: "127.0.0.1:50052" }),
      ACCOUNTS_ADDR: str({ default: "127.0.0.1:50051" }),
      // Seals hosters' tokens at rest (AES-256-GCM). A secret: no default, never logged.
      SECRETS_KEY: secretsKey(),
      // Lets hoster endpoints be loopback or private addresses: tests and local demos only.
      ALLOW_PRIVATE_UPSTREAMS: bool({ default: false }),
      HOSTER_CHECK_TIMEOUT_MS: millis({ default: 5_000 }),
      HOSTER_PROBE_INTERVAL_MS: millis({ default: 30_000 }),
      HOSTER_UNHEALTHY_AFTER: intBetween(1, 1_000)({ default: 2 }),
      LOCAL_MODEL_URL: url({ default: "http://127.0.0.1:8090" }),
      // A secret: no default, never logged.
      LOCAL_MODEL_TOKEN: secret(),
      LOCAL_MODELS: localModels({ default: parseLocalModels(DEFAULT_LOCAL_MODELS) }),
      UPSTREAM_CONNECT_TIMEOUT_MS: millis({ default: 5_000 }),
      UPSTREAM_FIRST_BYTE_TIMEOUT_MS: millis({ default: 30_000 }),
      UPSTREAM_IDLE_TIMEOUT_MS: millis({ default: 30_000 }),
      UPSTREAM_TOTAL_TIMEOUT_MS: millis({ default: 600_000 }),
    },
    env,
  );
}

export type RegistryConfig = ReturnType<typeof loadRegistryConfig>;
