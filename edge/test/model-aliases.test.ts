import { describe, expect, it } from "vitest";
import { CatalogTable } from "@mkt/proto/registry/v1/registry";
import type { AppError } from "@mkt/runtime/errors";
import { loadEdgeConfig } from "../src/config.ts";
import { ModelAliases, parseModelAliases } from "../src/routing/model-aliases.ts";
import { RoutingTable } from "../src/routing/routing-table.ts";

const required = { ADMIN_TOKEN: "admin token", TLS_MODE: "off" };

const TABLE = CatalogTable.fromPartial({
  version: 1n,
  platformModels: ["demo-small", "demo-agent", "gpt-5"].map((modelId) => ({
    modelId,
    provider: "local",
    contextWindow: 8192n,
    maxOutputTokensCap: 4096n,
    upstreams: [{ baseUrl: "http://local", token: "t", upstreamModel: modelId, trust: "platform", key: modelId }],
  })),
});

function routing(aliases: string): RoutingTable {
  const table = new RoutingTable(undefined, new ModelAliases(parseModelAliases(aliases)));
  table.apply(TABLE);
  return table;
}

describe("MODEL_ALIASES", () => {
  it("sends Claude Code's and Codex CLI's default model names to demo-agent by default", () => {
    const table = routing(
      loadEdgeConfig(required)
        .MODEL_ALIASES.map((a) => `${a.name}=${a.target}`)
        .join(","),
    );
    for (const name of [
      "claude-opus-4-8[1m]",
      "claude-haiku-4-5-20251001",
      "claude-sonnet-9",
      "gpt-5-codex",
      "gpt-5.5",
      "gpt-6.2-sol",
    ]) {
      expect(table.resolve(name, undefined).modelId, name).toBe("demo-agent");
    }
    // A model the gateway serves under the very name wins over any alias.
    expect(table.resolve("gpt-5", undefined).modelId).toBe("gpt-5");
  });

  it("prefers an exact name to a pattern, and the longest pattern to a shorter one", () => {
    const table = routing("claude-*=demo-agent,claude-haiku-*=demo-small,claude-haiku-4-5-x=auto");
    expect(table.resolve("claude-opus-4-8", undefined).modelId).toBe("demo-agent");
    expect(table.resolve("CLAUDE-HAIKU-4-5", undefined).modelId).toBe("demo-small");
    expect(table.resolve("claude-haiku-4-5-x", undefined).modelId).toBe("demo-small");
  });

  it("names the name the client sent when neither it nor its alias's model is found", () => {
    const table = routing("claude-*=gone");
    const error = (() => {
      try {
        table.resolve("claude-opus-4-8", undefined);
      } catch (err) {
        return err as AppError;
      }
    })();
    expect(error).toMatchObject({ code: "model_not_found", message: expect.stringContaining("claude-opus-4-8") });
  });

  it("is validated at start, naming the variable and the entry", () => {
    expect(loadEdgeConfig({ ...required, MODEL_ALIASES: "" }).MODEL_ALIASES).toEqual([]);
    for (const [bad, why] of [
      ["claude", /MODEL_ALIASES: entry 1 .*must be name=model/],
      ["a=b=c", /must be name=model/],
      ["a=b,A=c", /"A" is listed twice/],
      ["auto=demo-small", /"auto" is reserved/],
      ["a=demo-*", /the model must be a model name/],
      ["a b=c", /the name must be a model name/],
    ] as const) {
      expect(() => loadEdgeConfig({ ...required, MODEL_ALIASES: bad }), bad).toThrow(why);
    }
  });
});
