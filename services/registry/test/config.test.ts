import { describe, expect, it } from "vitest";
import { loadRegistryConfig } from "../src/config.ts";

const base = { LOCAL_MODEL_TOKEN: "t0ken", SECRETS_KEY: "ab".repeat(32) };

describe("registry configuration", () => {
  it("defaults to the one demo model with exact micro-USD prices", () => {
    const config = loadRegistryConfig(base);
    expect(config.LOCAL_MODELS).toEqual([
      {
        modelId: "demo-small",
        modelAlias: "Demo Small",
        contextWindow: 8192n,
        inputPricePer1mMicros: 500_000n,
        outputPricePer1mMicros: 1_500_000n,
        upstreamModel: "demo-small",
      },
    ]);
    expect(config.GRPC_PORT).toBe(50053);
    expect(config.UPSTREAM_TOTAL_TIMEOUT_MS).toBe(600_000);
  });

  it("requires LOCAL_MODEL_TOKEN and never supplies a default", () => {
    expect(() => loadRegistryConfig({})).toThrow(/LOCAL_MODEL_TOKEN/);
    expect(() => loadRegistryConfig({ LOCAL_MODEL_TOKEN: " " })).toThrow(/LOCAL_MODEL_TOKEN/);
  });

  it("requires SECRETS_KEY as 64 hex characters, and keeps hoster endpoints public by default", () => {
    expect(() => loadRegistryConfig({ LOCAL_MODEL_TOKEN: "t0ken" })).toThrow(/SECRETS_KEY/);
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

  it("rejects a non-positive timeout", () => {
    expect(() => loadRegistryConfig({ ...base, UPSTREAM_IDLE_TIMEOUT_MS: "0" })).toThrow(/UPSTREAM_IDLE_TIMEOUT_MS/);
  });
});
