import { describe, expect, it } from "vitest";
import { loadAccountsConfig } from "../src/config.ts";

describe("accounts configuration", () => {
  it("has local defaults", () => {
    const config = loadAccountsConfig({});
    expect(config.GRPC_HOST).toBe("127.0.0.1");
    expect(config.GRPC_PORT).toBe(50051);
    expect(config.DEFAULT_TIER).toBe("free");
    expect(config.SIGNUP_LIMIT_PER_IP_PER_HOUR).toBe(20);
  });

  it("allows 0 (no limit) and refuses what is not a count", () => {
    expect(loadAccountsConfig({ SIGNUP_LIMIT_PER_IP_PER_HOUR: "0" }).SIGNUP_LIMIT_PER_IP_PER_HOUR).toBe(0);
    for (const bad of ["-1", "1.5", "lots", "1000001"]) {
      expect(() => loadAccountsConfig({ SIGNUP_LIMIT_PER_IP_PER_HOUR: bad })).toThrow(/SIGNUP_LIMIT_PER_IP_PER_HOUR/);
    }
  });
});
