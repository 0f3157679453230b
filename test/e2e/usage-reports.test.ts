import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";

let system: RunningSystem;
let apiKey: string;
let usage30d: {
  total_requests: number;
  total_input_tokens: number;
  total_cached_input_tokens: number;
  total_output_tokens: number;
};
let costMicros: number;

beforeAll(async () => {
  system = await startSystem();
  ({ apiKey } = await signUp(system.url));
  const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey });
  for (const content of ["Tell me about usage reports.", "And about CSV files."]) {
    await client.chat.completions.create({ model: "auto", messages: [{ role: "user", content }], max_tokens: 20 });
  }
  const usage = await waitForUsage<{ usage_30d: typeof usage30d & { total_cost_microdollars: number } }>(
    system.url,
    apiKey,
    (u) => u.usage_30d.total_requests === 2,
  );
  usage30d = usage.usage_30d;
  costMicros = usage.usage_30d.total_cost_microdollars;
});
afterAll(async () => {
  await system?.close();
});

const get = (path: string, key: string | null = apiKey) =>
  fetch(`${system.url}${path}`, { headers: key === null ? {} : { authorization: `Bearer ${key}` } });

async function getJson<T = Record<string, unknown>>(path: string): Promise<T> {
  const res = await get(path);
  expect(res.status).toBe(200);
  return (await res.json()) as T;
}

const today = () => new Date().toISOString().slice(0, 10);

describe("GET /v1/usage/tokens", () => {
  it("defaults to 30 days by day: totals and a zero-filled series with +00:00 periods", async () => {
    const body = await getJson<{
      period_days: number;
      interval: string;
      totals: Record<string, number>;
      timeseries: Array<Record<string, number | string>>;
    }>("/v1/usage/tokens");
    expect(body.period_days).toBe(30);
    expect(body.interval).toBe("day");
    expect(body.timeseries).toHaveLength(31);
    const last = body.timeseries.at(-1)!;
    expect(last.period).toBe(`${today()}T00:00:00+00:00`);
    expect(last).toMatchObject({ requests: 2, local_requests: 2, hoster_requests: 0, cloud_requests: 0 });
    expect(Object.keys(last).sort()).toEqual(
      [
        "period",
        "input_tokens",
        "cached_input_tokens",
        "output_tokens",
        "total_tokens",
        "cost_usd",
        "requests",
        "local_requests",
        "hoster_requests",
        "cloud_requests",
        "avg_latency_ms",
      ].sort(),
    );
    expect(body.totals).toEqual({
      input_tokens: usage30d.total_input_tokens,
      cached_input_tokens: usage30d.total_cached_input_tokens,
      output_tokens: usage30d.total_output_tokens,
      total_tokens: usage30d.total_input_tokens + usage30d.total_output_tokens,
      cost_usd: costMicros / 1_000_000,
      requests: 2,
    });
    expect(body.timeseries.slice(0, -1).every((entry) => entry.requests === 0)).toBe(true);
  });

  it("hour, week and month intervals", async () => {
    const hours = await getJson<{ timeseries: Array<{ period: string }> }>("/v1/usage/tokens?days=1&interval=hour");
    expect(hours.timeseries).toHaveLength(25);
    expect(hours.timeseries[0]!.period).toMatch(/^\d{4}-\d\d-\d\dT\d\d:00:00\+00:00$/);
    const weeks = await getJson<{ timeseries: Array<{ period: string }> }>("/v1/usage/tokens?days=28&interval=week");
    for (const { period } of weeks.timeseries) expect(new Date(period).getUTCDay()).toBe(1); // Monday
    const months = await getJson<{ timeseries: Array<{ period: string }> }>("/v1/usage/tokens?days=365&interval=month");
    expect(months.timeseries.length).toBeGreaterThanOrEqual(13);
    for (const { period } of months.timeseries) expect(period).toMatch(/^\d{4}-\d\d-01T00:00:00\+00:00$/);
  });
});

describe("GET /v1/usage/breakdown", () => {
  it("by model with the platform's share, and daily entries", async () => {
    const body = await getJson<{
      by_model: Array<Record<string, number | string>>;
      daily: Array<Record<string, number | string>>;
    }>("/v1/usage/breakdown?days=7");
    expect(body.by_model).toEqual([
      {
        model_id: "demo-small",
        provider: "local",
        requests: 2,
        input_tokens: usage30d.total_input_tokens,
        cached_input_tokens: usage30d.total_cached_input_tokens,
        output_tokens: usage30d.total_output_tokens,
        total_cost_usd: costMicros / 1_000_000,
        platform_fee_usd: costMicros / 1_000_000, // a local model's cost is all platform fee
        hoster_earned_usd: 0,
        avg_latency_ms: expect.any(Number),
      },
    ]);
    expect(body.daily).toHaveLength(8);
    expect(body.daily.at(-1)).toEqual({
      date: today(),
      requests: 2,
      input_tokens: usage30d.total_input_tokens,
      cached_input_tokens: usage30d.total_cached_input_tokens,
      output_tokens: usage30d.total_output_tokens,
      total_cost_usd: costMicros / 1_000_000,
    });
  });
});

describe("GET /v1/usage/export", () => {
  it("is a CSV attachment with the spec's columns, then cached_tokens, one row per request", async () => {
    const res = await get("/v1/usage/export?days=7");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/csv; charset=utf-8");
    expect(res.headers.get("content-disposition")).toBe('attachment; filename="usage-7d.csv"');
    const lines = (await res.text()).trimEnd().split("\n");
    expect(lines[0]).toBe(
      "timestamp,model,provider,input_tokens,output_tokens,total_tokens,cost_usd,latency_ms,success,cached_tokens",
    );
    expect(lines).toHaveLength(3);
    const rows = lines.slice(1).map((line) => line.split(","));
    for (const [timestamp, model, provider, input, output, total, , latency, success, cached] of rows) {
      expect(timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      expect([model, provider, success]).toEqual(["demo-small", "local", "true"]);
      expect(Number(total)).toBe(Number(input) + Number(output));
      expect(Number(latency)).toBeGreaterThanOrEqual(0);
      expect(Number(cached)).toBeLessThanOrEqual(Number(input));
    }
    expect(rows.reduce((sum, row) => sum + Number(row[3]), 0)).toBe(usage30d.total_input_tokens);
    // Exact decimal text, six places, summing to the charged micro-USD.
    expect(rows.every((row) => /^\d+\.\d{6}$/.test(row[6]!))).toBe(true);
    expect(rows.reduce((sum, row) => sum + Math.round(Number(row[6]) * 1_000_000), 0)).toBe(costMicros);
  });

  it("defaults to 30 days in the file name", async () => {
    const res = await get("/v1/usage/export");
    expect(res.headers.get("content-disposition")).toBe('attachment; filename="usage-30d.csv"');
    await res.text();
  });
});

describe("bad parameters → 400 invalid_request naming the parameter", () => {
  const cases: Array<[string, string]> = [
    ["days=0", "days"],
    ["days=366", "days"],
    ["days=-1", "days"],
    ["days=abc", "days"],
    ["days=1.5", "days"],
    ["days=", "days"],
    ["interval=year", "interval"],
  ];
  for (const path of ["/v1/usage/tokens", "/v1/usage/breakdown", "/v1/usage/export"]) {
    for (const [query, param] of cases) {
      if (param === "interval" && path !== "/v1/usage/tokens") continue;
      it(`${path}?${query}`, async () => {
        const res = await get(`${path}?${query}`);
        expect(res.status).toBe(400);
        expect(res.headers.get("content-type")).toContain("application/json");
        const body = (await res.json()) as { error: Record<string, unknown> };
        expect(body.error).toMatchObject({ type: "invalid_request_error", code: "invalid_request", param });
        expect(body.error.message).toEqual(expect.stringContaining(param));
      });
    }
  }

  it("no key → 401", async () => {
    for (const path of ["/v1/usage/tokens", "/v1/usage/breakdown", "/v1/usage/export"]) {
      const res = await get(path, null);
      expect(res.status).toBe(401);
    }
  });

  it("the parameters are documented in the OpenAPI document", async () => {
    const doc = (await (await fetch(`${system.url}/docs/json`)).json()) as {
      paths: Record<string, { get: { parameters: Array<{ name: string; in: string }> } }>;
    };
    const names = (path: string) => doc.paths[path]!.get.parameters.map((p) => `${p.in}:${p.name}`).sort();
    expect(names("/v1/usage/tokens")).toEqual(["query:days", "query:interval"]);
    expect(names("/v1/usage/breakdown")).toEqual(["query:days"]);
    expect(names("/v1/usage/export")).toEqual(["query:days"]);
  });
});
