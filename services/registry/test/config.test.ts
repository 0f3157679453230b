import { describe, expect, it } from "vitest";
import { loadRegistryConfig } from "../src/config.ts";

const base = { LOCAL_MODEL_TOKEN: "t0ken", SECRETS_KEY: "ab".repeat(32), TLS_MODE: "off" };

describe("registry configuration", () => {
  it("defaults to the demo models (a small one, and one sized for coding agents) with exact micro-USD prices, cached input at a tenth", () => {
    const config = loadRegistryConfig(base);
    expect(config.LOCAL_MODELS).toEqual([
      {
        modelId: "demo-small",
        modelAlias: "Demo Small",
        contextWindow: 8192n,
        inputPricePer1mMicros: 500_000n,
        cachedInputPricePer1mMicros: 50_000n,
        outputPricePer1mMicros: 1_500_000n,
        upstreamModel: "demo-small",
        kind: "chat",
        maxN: 8n,
      },
      {
        modelId: "demo-agent",
        modelAlias: "Demo Agent",
        contextWindow: 200_000n,
        inputPricePer1mMicros: 500_000n,
        cachedInputPricePer1mMicros: 50_000n,
        outputPricePer1mMicros: 1_500_000n,
        upstreamModel: "demo-agent",
        kind: "chat",
        maxN: 8n,
      },
      {
        modelId: "demo-embed",
        modelAlias: "Demo Embed",
        contextWindow: 8192n,
        inputPricePer1mMicros: 100_000n,
        outputPricePer1mMicros: 0n,
        upstreamModel: "demo-embed",
        kind: "embedding",
        maxN: 1n,
      },
    ]);
    expect(config.GRPC_PORT).toBe(50053);
  });

  it("requires LOCAL_MODEL_TOKEN and never supplies a default", () => {
    expect(() => loadRegistryConfig({ TLS_MODE: "off" })).toThrow(/LOCAL_MODEL_TOKEN/);
    expect(() => loadRegistryConfig({ TLS_MODE: "off", LOCAL_MODEL_TOKEN: " " })).toThrow(/LOCAL_MODEL_TOKEN/);
  });

  it("requires SECRETS_KEY as 64 hex characters, and keeps hoster endpoints public by default", () => {
    expect(() => loadRegistryConfig({ TLS_MODE: "off", LOCAL_MODEL_TOKEN: "t0ken" })).toThrow(/SECRETS_KEY/);
    expect(() => loadRegistryConfig({ ...base, SECRETS_KEY: "short" })).toThrow(/SECRETS_KEY: must be 32 bytes/);
    const config = loadRegistryConfig(base);
    expect(config.ALLOW_PRIVATE_UPSTREAMS).toBe(false);
    expect(config.ACCOUNTS_ADDR).toBe("127.0.0.1:50051");
    expect(config.HOSTER_PROBE_INTERVAL_MS).toBe(30_000);
    expect(config.HOSTER_UNHEALTHY_AFTER).toBe(2);
    expect(config.HOSTER_CHECK_TIMEOUT_MS).toBe(5_000);
  });

  it.each([
    ["not JSON", "{oops"],
    ["not an array", '{"model_id":"x"}'],
    ["empty", "[]"],
    ["missing id", '[{"context_window":8,"input_price_per_1m_usd":"1","output_price_per_1m_usd":"1"}]'],
    [
      "bad price",
      '[{"model_id":"x","context_window":8,"input_price_per_1m_usd":"cheap","output_price_per_1m_usd":"1"}]',
    ],
    [
      "negative price",
      '[{"model_id":"x","context_window":8,"input_price_per_1m_usd":"-1","output_price_per_1m_usd":"1"}]',
    ],
    ["bad context", '[{"model_id":"x","context_window":0,"input_price_per_1m_usd":"1","output_price_per_1m_usd":"1"}]'],
    [
      "alias clash",
      '[{"model_id":"a","context_window":8,"input_price_per_1m_usd":1,"output_price_per_1m_usd":1},' +
        '{"model_id":"b","model_alias":"A","context_window":8,"input_price_per_1m_usd":1,"output_price_per_1m_usd":1}]',
    ],
  ])("fails fast naming LOCAL_MODELS when it is %s", (_case, value) => {
    expect(() => loadRegistryConfig({ ...base, LOCAL_MODELS: value })).toThrow(/LOCAL_MODELS/);
  });

  it("accepts prices as strings or numbers and an upstream model name", () => {
    const config = loadRegistryConfig({
      ...base,
      LOCAL_MODELS:
        '[{"model_id":"m","context_window":4096,"input_price_per_1m_usd":0.15,"output_price_per_1m_usd":"0.000001","upstream_model":"llama3:8b"}]',
    });
    expect(config.LOCAL_MODELS[0]).toMatchObject({
      inputPricePer1mMicros: 150_000n,
      outputPricePer1mMicros: 1n,
      upstreamModel: "llama3:8b",
      modelAlias: "",
    });
  });

  it("reads kind and max_n, defaulting to a chat model of one choice, and refuses bad ones", () => {
    const entry = '"model_id":"m","context_window":4096,"input_price_per_1m_usd":1,"output_price_per_1m_usd":1';
    const load = (extra: string) =>
      loadRegistryConfig({ ...base, LOCAL_MODELS: `[{${entry}${extra}}]` }).LOCAL_MODELS[0];
    expect(load("")).toMatchObject({ kind: "chat", maxN: 1n });
    expect(load(',"kind":"embedding","max_n":4')).toMatchObject({ kind: "embedding", maxN: 4n });
    expect(() => load(',"kind":"image"')).toThrow(/LOCAL_MODELS: entry 0: kind must be "chat" or "embedding"/);
    for (const bad of ["0", "1.5", '"2"', "129"]) {
      expect(() => load(`,"max_n":${bad}`)).toThrow(/LOCAL_MODELS: entry 0: max_n must be an integer from 1 to 128/);
    }
  });

  it("reads cached_input_price_per_1m_usd, absent unless set (the input price then), never above the input price", () => {
    const entry = '"model_id":"m","context_window":4096,"input_price_per_1m_usd":"0.50","output_price_per_1m_usd":1';
    const load = (variable: "LOCAL_MODELS" | "CLOUD_MODELS", extra: string) => {
      const models = `[{${entry}${extra}}]`;
      const cloud = { CLOUD_BASE_URL: "https://cloud.example/v1", CLOUD_API_KEY: "sk-x", CLOUD_MODELS: models };
      const config = loadRegistryConfig(
        variable === "LOCAL_MODELS" ? { ...base, LOCAL_MODELS: models } : { ...base, ...cloud },
      );
      return config[variable]![0]!;
    };
    expect(load("LOCAL_MODELS", "").cachedInputPricePer1mMicros).toBeUndefined();
    expect(load("LOCAL_MODELS", ',"cached_input_price_per_1m_usd":"0.05"').cachedInputPricePer1mMicros).toBe(50_000n);
    expect(load("CLOUD_MODELS", ',"cached_input_price_per_1m_usd":0.5').cachedInputPricePer1mMicros).toBe(500_000n);
    // An explicit 0 is a price: cached tokens free.
    expect(load("LOCAL_MODELS", ',"cached_input_price_per_1m_usd":0').cachedInputPricePer1mMicros).toBe(0n);
    expect(() => load("LOCAL_MODELS", ',"cached_input_price_per_1m_usd":"0.51"')).toThrow(
      /LOCAL_MODELS: entry 0: cached_input_price_per_1m_usd must not be above input_price_per_1m_usd/,
    );
    expect(() => load("CLOUD_MODELS", ',"cached_input_price_per_1m_usd":"-0.01"')).toThrow(
      /CLOUD_MODELS: entry 0: cached_input_price_per_1m_usd must not be negative/,
    );
    expect(() => load("LOCAL_MODELS", ',"cached_input_price_per_1m_usd":"a tenth"')).toThrow(
      /LOCAL_MODELS: entry 0: cached_input_price_per_1m_usd must be a USD amount/,
    );
  });

  it("takes one local model server or several replicas, in order", () => {
    const config = loadRegistryConfig(base);
    expect(config.LOCAL_MODEL_URL).toEqual(["http://127.0.0.1:8090"]);
    const replicas = loadRegistryConfig({ ...base, LOCAL_MODEL_URL: "http://a:8090, http://b:8090/base" });
    expect(replicas.LOCAL_MODEL_URL).toEqual(["http://a:8090", "http://b:8090/base"]);
    for (const bad of ["", "http://a:8090,ftp://b", "http://a:8090,http://a:8090", "not a url"]) {
      expect(() => loadRegistryConfig({ ...base, LOCAL_MODEL_URL: bad })).toThrow(/LOCAL_MODEL_URL/);
    }
  });
});

describe("the cloud API (CLOUD_BASE_URL, CLOUD_API_KEY, CLOUD_MODELS)", () => {
  const KEY = "sk-cloud-config-SECRET-91";
  const MODELS =
    '[{"model_id":"gpt-4o-mini","model_alias":"GPT Mini","context_window":128000,' +
    '"input_price_per_1m_usd":"0.15","output_price_per_1m_usd":"0.60"}]';
  const cloud = { CLOUD_BASE_URL: "https://api.openai.com/v1", CLOUD_API_KEY: KEY, CLOUD_MODELS: MODELS };
  const failure = (env: Record<string, string>) => {
    try {
      loadRegistryConfig({ ...base, ...env });
    } catch (err) {
      return String((err as Error).message);
    }
    throw new Error("the configuration was accepted");
  };

  it("is off when unset: no cloud models, no key", () => {
    const config = loadRegistryConfig(base);
    expect(config.CLOUD_BASE_URL).toBeUndefined();
    expect(config.CLOUD_API_KEY).toBeUndefined();
    expect(config.CLOUD_MODELS).toBeUndefined();
  });

  it("parses CLOUD_MODELS exactly as LOCAL_MODELS, and drops an SDK-style trailing /v1 from the URL", () => {
    const config = loadRegistryConfig({ ...base, ...cloud });
    expect(config.CLOUD_API_KEY).toBe(KEY);
    expect(config.CLOUD_BASE_URL).toBe("https://api.openai.com");
    expect(config.CLOUD_MODELS).toEqual([
      {
        modelId: "gpt-4o-mini",
        modelAlias: "GPT Mini",
        contextWindow: 128_000n,
        inputPricePer1mMicros: 150_000n,
        outputPricePer1mMicros: 600_000n,
        upstreamModel: "gpt-4o-mini",
        kind: "chat",
        maxN: 1n,
      },
    ]);
    const groq = loadRegistryConfig({ ...base, ...cloud, CLOUD_BASE_URL: "https://api.groq.com/openai/v1/" });
    expect(groq.CLOUD_BASE_URL).toBe("https://api.groq.com/openai");
  });

  it("needs all three variables once one is set, naming the missing ones and never echoing the key", () => {
    const onlyKey = failure({ CLOUD_API_KEY: KEY });
    expect(onlyKey).toMatch(/CLOUD_BASE_URL: required/);
    expect(onlyKey).toMatch(/CLOUD_MODELS: required/);
    expect(onlyKey).not.toContain(KEY);
    const noKey = failure({ CLOUD_BASE_URL: cloud.CLOUD_BASE_URL, CLOUD_MODELS: MODELS });
    expect(noKey).toMatch(/CLOUD_API_KEY: required/);
    expect(failure({ ...cloud, CLOUD_API_KEY: "  " })).toMatch(/CLOUD_API_KEY: must not be empty/);
  });

  it.each([
    ["not http(s)", "ftp://api.example.com"],
    ["not a URL", "api.openai.com"],
    ["credentials in the URL", `https://user:${KEY}@api.example.com/v1`],
    ["a query", `https://api.example.com/v1?key=${KEY}`],
  ])("refuses a CLOUD_BASE_URL with %s, without echoing it", (_case, value) => {
    const message = failure({ ...cloud, CLOUD_BASE_URL: value });
    expect(message).toMatch(/CLOUD_BASE_URL/);
    expect(message).not.toContain(KEY);
  });

  it("refuses bad CLOUD_MODELS and a name a local model already uses", () => {
    expect(failure({ ...cloud, CLOUD_MODELS: "[]" })).toMatch(/CLOUD_MODELS: must list at least one model/);
    const clash = failure({
      ...cloud,
      CLOUD_MODELS:
        '[{"model_id":"demo small","context_window":8,"input_price_per_1m_usd":1,"output_price_per_1m_usd":1}]',
    });
    expect(clash).toMatch(/CLOUD_MODELS: "demo small" is already a model id or alias in LOCAL_MODELS/);
  });
});
