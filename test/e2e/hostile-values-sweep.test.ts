import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Every route of the edge (edge/src/routes/*.ts; the OpenAPI paths are checked against this
// table) swept with hostile values in each body field, path parameter and query parameter:
// nothing a client sends is a 5xx, every error is OpenAI-shaped (the Messages API's Anthropic-shaped
// errors carry the same fields), and a value of the wrong type,
// or of the right type but invalid for its field (INVALID), is a 400. Values are written as raw JSON text so that 2^63−1 and lone surrogates arrive exactly.

type Auth = "none" | "key" | "hoster" | "admin";
interface Route {
  method: "GET" | "POST" | "PATCH" | "DELETE";
  /** `:name` segments are path parameters. */
  path: string;
  auth: Auth;
  /** A valid body: each field is replaced in turn (absent: the route takes no body). */
  body?: Record<string, unknown>;
  query?: string[];
}

const MB = 1024 * 1024;
const DEEP = 5_000;
const deepArray = "[".repeat(DEEP) + "]".repeat(DEEP);

/** Hostile JSON values, by name, as raw JSON text. */
const VALUES: Record<string, string> = {
  "2^63-1": "9223372036854775807",
  "-2^63": "-9223372036854775808",
  "1e300": "1e300",
  negative: "-1",
  fraction: "1.5",
  zero: "0",
  string: '"hostile"',
  boolean: "true",
  null: "null",
  array: "[]",
  object: "{}",
  NUL: '"\\u0000"',
  "NUL inside": '"id\\u0000x"',
  "lone surrogate": '"\\ud800"',
  "1 MB string": JSON.stringify("x".repeat(MB)),
  "nested 5,000 deep": deepArray,
};
const JSON_TYPE: Record<string, string> = {
  "2^63-1": "number",
  "-2^63": "number",
  "1e300": "number",
  negative: "number",
  fraction: "number",
  zero: "number",
  string: "string",
  boolean: "boolean",
  null: "null",
  array: "array",
  object: "object",
  NUL: "string",
  "NUL inside": "string",
  "lone surrogate": "string",
  "1 MB string": "string",
  "nested 5,000 deep": "array",
};

/** Numbers no field takes: beyond any bound, or below zero. */
const OUT_OF_RANGE = ["2^63-1", "-2^63", "1e300", "negative"];
const NUL_TEXT = ["NUL", "NUL inside"];
/**
 * Values of the right JSON type that a body field still refuses with a 400, by field name (the
 * same name means the same rule on every route). Values not listed may be valid (a fraction of a
 * dollar, a zero rpm_limit meaning none, NUL inside chat text): those must only never be a 5xx.
 */
const INVALID: Record<string, string[]> = {
  max_tokens: [...OUT_OF_RANGE, "fraction", "zero"],
  max_output_tokens: [...OUT_OF_RANGE, "fraction", "zero"],
  count: [...OUT_OF_RANGE, "fraction", "zero"],
  rpm_limit: [...OUT_OF_RANGE, "fraction"],
  max_concurrent: [...OUT_OF_RANGE, "fraction"],
  amount_usd: [...OUT_OF_RANGE, "zero"],
  limit_usd: OUT_OF_RANGE,
  input_price_per_1m_usd: OUT_OF_RANGE,
  output_price_per_1m_usd: OUT_OF_RANGE,
  email: NUL_TEXT,
  name: NUL_TEXT,
  kind: NUL_TEXT,
  limit_reset: NUL_TEXT,
  pricing_model: NUL_TEXT,
  endpoint_url: NUL_TEXT,
  api_key: NUL_TEXT,
  invite_code: NUL_TEXT,
};

/** Hostile path-parameter and query values, percent-encoded as a client would send them. */
/** Of TEXT_VALUES, those no identifier can be: a 400 in any path parameter. */
const NEVER_AN_ID = new Set(["NUL", "NUL inside", "lone surrogate (invalid UTF-8)", "10 KB"]);

const TEXT_VALUES: Record<string, string> = {
  NUL: "%00",
  "NUL inside": "id%00x",
  "lone surrogate (invalid UTF-8)": "%ED%A0%80",
  "2^63-1": "9223372036854775807",
  "1e300": "1e300",
  negative: "-1",
  fraction: "1.5",
  "10 KB": "x".repeat(10_000),
  "array syntax": "a&days=2",
};

let system: RunningSystem;
let apiKey: string;
let accountId: string;
let hoster: RegisteredHoster;
let productId: string;

const ROUTES = (): Route[] => [
  {
    method: "POST",
    path: "/v1/accounts",
    auth: "none",
    body: { email: "new@example.com", password: "long enough pass" },
  },
  {
    method: "POST",
    path: "/auth/login",
    auth: "none",
    body: { email: "a@example.com", password: "x", kind: "customer" },
  },
  { method: "POST", path: "/hosters/login", auth: "none", body: { email: "a@example.com", password: "x" } },
  { method: "GET", path: "/auth/session", auth: "none" },
  { method: "POST", path: "/auth/session-key", auth: "none" },
  { method: "POST", path: "/auth/logout", auth: "none" },
  { method: "POST", path: "/hosters/logout", auth: "none" },
  { method: "GET", path: "/v1/keys", auth: "key" },
  { method: "POST", path: "/v1/keys", auth: "key", body: { name: "k" } },
  { method: "PATCH", path: "/v1/keys/:key_id", auth: "key", body: { limit_usd: 1, limit_reset: "daily" } },
  { method: "DELETE", path: "/v1/keys/:key_id", auth: "key" },
  { method: "GET", path: "/v1/models", auth: "key" },
  { method: "GET", path: "/v1/models/:model", auth: "key" },
  { method: "GET", path: "/v1/models/:author/:slug", auth: "key" },
  { method: "GET", path: "/v1/models/:id/endpoints", auth: "key" },
  { method: "GET", path: "/v1/models/:author/:slug/endpoints", auth: "key" },
  { method: "GET", path: "/v1/usage", auth: "key" },
  { method: "GET", path: "/v1/usage/tokens", auth: "key", query: ["days", "interval"] },
  { method: "GET", path: "/v1/usage/breakdown", auth: "key", query: ["days"] },
  { method: "GET", path: "/v1/usage/export", auth: "key", query: ["days"] },
  { method: "GET", path: "/v1/generations/:id", auth: "key" },
  { method: "GET", path: "/v1/subscriptions", auth: "key" },
  { method: "POST", path: "/v1/subscriptions", auth: "key", body: { product_id: productId } },
  { method: "DELETE", path: "/v1/subscriptions/:subscription_id", auth: "key" },
  {
    method: "POST",
    path: "/v1/chat/completions",
    auth: "key",
    body: { model: "demo-small", messages: [{ role: "user", content: "hi" }], max_tokens: 2, stream: false },
  },
  {
    method: "POST",
    path: "/v1/responses",
    auth: "key",
    body: { model: "demo-small", input: "hi", instructions: "Be brief.", max_output_tokens: 16, stream: false },
  },
  {
    method: "POST",
    path: "/v1/embeddings",
    auth: "key",
    body: { model: "demo-embed", input: "hi", encoding_format: "float" },
  },
  {
    method: "POST",
    path: "/v1/messages",
    auth: "key",
    body: { model: "demo-agent", messages: [{ role: "user", content: "hi" }], max_tokens: 2, stream: false },
  },
  {
    method: "POST",
    path: "/v1/messages/count_tokens",
    auth: "key",
    body: { model: "demo-agent", messages: [{ role: "user", content: "hi" }] },
  },
  { method: "GET", path: "/v1/hosters", auth: "key" },
  {
    method: "POST",
    path: "/hosters/register",
    auth: "none",
    body: {
      name: "H",
      email: "h@example.com",
      endpoint_url: "http://127.0.0.1:1",
      api_key: "12345678",
      invite_code: "nope",
      models: [{ model_id: "m", context_window: 8192 }],
    },
  },
  { method: "GET", path: "/hosters/me", auth: "hoster" },
  {
    method: "PATCH",
    path: "/hosters/me/models",
    auth: "hoster",
    body: { model_id: hoster.modelId, quantization: "int4" },
  },
  {
    method: "POST",
    path: "/hosters/products",
    auth: "hoster",
    body: { name: "P", pricing_model: "payg", input_price_per_1m_usd: 1, output_price_per_1m_usd: 1, rpm_limit: 60 },
  },
  { method: "GET", path: "/hosters/products", auth: "hoster" },
  { method: "PATCH", path: "/hosters/products/:product_id", auth: "hoster", body: { name: "P2", max_concurrent: 3 } },
  { method: "POST", path: "/hosters/products/:product_id/archive", auth: "hoster" },
  { method: "GET", path: "/v1/hoster/subscribers", auth: "hoster" },
  { method: "POST", path: "/hosters/subscribers/:subscription_id/pause", auth: "hoster" },
  { method: "POST", path: "/hosters/subscribers/:subscription_id/resume", auth: "hoster" },
  { method: "GET", path: "/v1/earnings", auth: "hoster", query: ["days"] },
  { method: "GET", path: "/v1/earnings/by-model", auth: "hoster", query: ["days"] },
  { method: "POST", path: "/admin/invites", auth: "admin", body: { count: 1 } },
  { method: "POST", path: "/admin/accounts/:account_id/credits", auth: "admin", body: { amount_usd: 1 } },
  { method: "GET", path: "/admin/usage/dead-letters", auth: "admin", query: ["service"] },
  {
    method: "POST",
    path: "/admin/usage/dead-letters/replay",
    auth: "admin",
    body: { ids: [] },
    query: ["service"],
  },
  { method: "GET", path: "/healthz", auth: "none" },
  { method: "GET", path: "/readyz", auth: "none" },
  { method: "GET", path: "/metrics", auth: "none" },
  { method: "GET", path: "/portal", auth: "none" },
];

function headersFor(auth: Auth): Record<string, string> {
  if (auth === "key") return { authorization: `Bearer ${apiKey}` };
  if (auth === "admin") return { authorization: `Bearer ${system.adminToken}` };
  if (auth === "hoster") return { cookie: hoster.cookie };
  return {};
}

/** A real id for each path parameter, so only the hostile one is wrong. */
const realParam = (name: string): string => ({ account_id: accountId, product_id: productId })[name] ?? "unknown-id";

interface Outcome {
  status: number;
  body: unknown;
}

async function send(route: Route, path: string, body?: string): Promise<Outcome> {
  const headers: Record<string, string> = headersFor(route.auth);
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${system.url}${path}`, { method: route.method, headers, body });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: the shape check below reports it
  }
  return { status: res.status, body: parsed };
}

const failures: string[] = [];
/** Collects every violation instead of stopping at the first, so one run lists them all. */
function check(what: string, outcome: Outcome, expectStatus?: number) {
  const { status, body } = outcome;
  const error = (body as { error?: Record<string, unknown> } | undefined)?.error;
  const shaped =
    !!error &&
    typeof error.message === "string" &&
    typeof error.type === "string" &&
    "param" in error &&
    "code" in error;
  if (status >= 500) failures.push(`${what}: ${status} ${JSON.stringify(body).slice(0, 200)}`);
  else if (status >= 400 && !shaped) failures.push(`${what}: ${status} not OpenAI-shaped`);
  else if (expectStatus !== undefined && status !== expectStatus)
    failures.push(`${what}: ${status}, expected ${expectStatus} ${JSON.stringify(body).slice(0, 200)}`);
}

const fillPath = (path: string, hostile?: { param: string; value: string }) =>
  path.replace(/:([a-z_]+)/g, (_, name: string) => (hostile?.param === name ? hostile.value : realParam(name)));

/** The JSON text of `body` with `field` replaced by raw JSON `value`. */
function bodyWith(body: Record<string, unknown>, field: string, value: string): string {
  const marker = "__HOSTILE_VALUE__";
  return JSON.stringify({ ...body, [field]: marker }).replace(`"${marker}"`, () => value);
}

beforeAll(async () => {
  // Every value of the sweep is judged on its content, not on the per-IP limits it would reach.
  const unlimited = "1000000";
  system = await startSystem({
    accounts: {
      SIGNUP_LIMIT_PER_IP_PER_HOUR: unlimited,
      INVITE_FAILURES_PER_IP_PER_HOUR: unlimited,
      LOGIN_FAILURES_PER_IP_PER_HOUR: unlimited,
    },
  });
  ({ apiKey, accountId } = await signUp(system.url));
  hoster = await registerHoster(system);
  const created = await fetch(`${system.url}/hosters/products`, {
    method: "POST",
    headers: { cookie: hoster.cookie, "content-type": "application/json" },
    body: JSON.stringify({
      name: "Sweep",
      pricing_model: "payg",
      input_price_per_1m_usd: 1,
      output_price_per_1m_usd: 1,
    }),
  });
  productId = ((await created.json()) as { product_id: string }).product_id;
}, 60_000);
afterAll(async () => {
  await hoster?.server.close();
  await system?.close();
});

describe("hostile values on every route: never a 5xx, always the OpenAI error shape", () => {
  it("the table lists every documented route", async () => {
    const doc = (await (await fetch(`${system.url}/docs/json`)).json()) as { paths: Record<string, object> };
    const documented = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${path.replace(/\{([a-z_]+)\}/g, ":$1")}`),
    );
    const swept = new Set(ROUTES().map((r) => `${r.method} ${r.path}`));
    expect(documented.filter((r) => !swept.has(r))).toEqual([]);
  });

  it("body fields", async () => {
    for (const route of ROUTES()) {
      if (!route.body) continue;
      const path = fillPath(route.path);
      for (const [field, valid] of Object.entries(route.body)) {
        const validType = Array.isArray(valid) ? "array" : valid === null ? "null" : typeof valid;
        for (const [name, value] of Object.entries(VALUES)) {
          const wrongType = JSON_TYPE[name] !== validType && JSON_TYPE[name] !== "null";
          const invalid = wrongType || (INVALID[field]?.includes(name) ?? false);
          const outcome = await send(route, path, bodyWith(route.body, field, value));
          check(`${route.method} ${route.path} ${field}=${name}`, outcome, invalid ? 400 : undefined);
        }
      }
      check(`${route.method} ${route.path} whole body nested`, await send(route, path, deepArray), 400);
      const deepUnknown = bodyWith(route.body, "unknown_field", deepArray);
      check(`${route.method} ${route.path} unknown field nested`, await send(route, path, deepUnknown));
    }
    expect(failures).toEqual([]);
  }, 120_000);

  it("path and query parameters", async () => {
    failures.length = 0;
    for (const route of ROUTES()) {
      const params = [...route.path.matchAll(/:([a-z_]+)/g)].map((m) => m[1]!);
      const body = route.body ? JSON.stringify(route.body) : undefined;
      for (const [name, value] of Object.entries(TEXT_VALUES)) {
        for (const param of params) {
          const outcome = await send(route, fillPath(route.path, { param, value }), body);
          check(`${route.method} ${route.path} ${param}=${name}`, outcome, NEVER_AN_ID.has(name) ? 400 : undefined);
        }
        for (const param of route.query ?? []) {
          const outcome = await send(route, `${fillPath(route.path)}?${param}=${value}`, body);
          // `days` is 1..365, `interval` and `service` enum words: none of these values is either.
          check(`${route.method} ${route.path}?${param}=${name}`, outcome, 400);
        }
      }
    }
    expect(failures).toEqual([]);
  }, 60_000);
});
