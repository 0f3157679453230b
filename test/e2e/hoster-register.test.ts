import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomToken } from "@mkt/runtime/ids";
import {
  jsonAnswer,
  modelList,
  startRealHoster,
  startScriptedHoster,
} from "../../services/registry/test/hoster-servers.ts";
import { createInvite, registerHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";
import { apiCall } from "./api-call.ts";

let system: RunningSystem;
const cleanups: Array<() => Promise<void>> = [];
beforeAll(async () => {
  system = await startSystem();
});
afterAll(async () => {
  for (const cleanup of cleanups) await cleanup();
  await system?.close();
});

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${system.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });

describe("POST /hosters/register through the edge", () => {
  it("registers a real hoster server, answers once with the portal password and logs the hoster in", async () => {
    const server = await startRealHoster({ models: ["qwen-7b.gguf"] });
    cleanups.push(() => server.close());
    const email = `h-${randomToken(6)}@example.com`;
    const res = await post("/hosters/register", {
      name: "GPU Garage",
      email,
      endpoint_url: server.url,
      api_key: server.token,
      invite_code: await createInvite(system),
      models: [
        {
          model_id: "qwen-7b.gguf",
          model_alias: "Qwen 7B",
          context_window: 32768,
          canonical_id: "Qwen/Qwen2.5-7B-Instruct",
          quantization: "Q4_K_M",
        },
      ],
    });
    expect(res.status).toBe(201);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({
      name: "GPU Garage",
      status: "healthy",
      models: [
        {
          model_id: "qwen-7b.gguf",
          model_alias: "Qwen 7B",
          context_window: 32768,
          canonical_id: "Qwen/Qwen2.5-7B-Instruct",
          quantization: "q4_k_m",
        },
      ],
    });
    expect(body.hoster_id).toEqual(expect.any(String));
    expect(body.portal_password).toEqual(expect.any(String));
    // The server's token never comes back.
    expect(JSON.stringify(body)).not.toContain(server.token);
    const setCookie = res.headers.getSetCookie()[0] ?? "";
    expect(setCookie).toMatch(/^mk_session=mks_/);
    expect(setCookie).toContain("HttpOnly");

    const me = await fetch(`${system.url}/hosters/me`, { headers: { cookie: setCookie.split(";")[0]! } });
    expect(me.status).toBe(200);
    const profile = (await me.json()) as Record<string, unknown>;
    expect(profile).toMatchObject({
      hoster_id: body.hoster_id,
      email,
      endpoint_url: server.url,
      status: "healthy",
      usage_mismatches: 0,
    });
    expect(JSON.stringify(profile)).not.toContain(server.token);

    // The generated password logs in on the hoster login.
    const login = await post("/hosters/login", { email, password: body.portal_password });
    expect(login.status).toBe(200);
  });

  it("lists the hoster to customers in GET /v1/hosters without its endpoint or token", async () => {
    const hoster = await registerHoster(system, { name: "Listed Hoster" });
    cleanups.push(() => hoster.server.close());
    const { apiKey } = await signUp(system.url);
    const res = await fetch(`${system.url}/v1/hosters`, { headers: { authorization: `Bearer ${apiKey}` } });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).not.toContain(hoster.server.token);
    expect(text).not.toContain(hoster.server.url);
    const { data } = JSON.parse(text) as { data: Array<{ hoster_id: string; status: string; models: unknown[] }> };
    const listed = data.find((h) => h.hoster_id === hoster.hosterId);
    expect(listed).toMatchObject({ name: "Listed Hoster", status: "healthy" });
    // The hoster's own figure, not the public list's.
    expect(listed).not.toHaveProperty("usage_mismatches");
    expect(listed!.models).toEqual([
      {
        model_id: hoster.modelId,
        model_alias: "Llama 3 8B",
        context_window: 8192,
        kind: "chat",
        max_n: 1,
        // Registered without them: its public name is its model_id, its quantization unknown.
        canonical_id: hoster.modelId,
        quantization: "unknown",
        // No answers yet: zero counts, no uptime or percentiles.
        stats: {
          last_30m: expect.objectContaining({ requests: 0, uptime: null, latency_p50_ms: null }),
          last_1d: expect.objectContaining({ requests: 0, uptime: null }),
          hours: [],
        },
        // On no open plan: never verified.
        verification: { status: "unverified", last_run_at: null, checks: [] },
      },
    ]);

    expect((await fetch(`${system.url}/v1/hosters`)).status).toBe(401);
  });

  it("rejects a server that answers without the token, and leaves the invite unspent", async () => {
    const open = await startScriptedHoster((req, res) =>
      req.url === "/health" ? jsonAnswer(res, 200, { status: "ok" }) : jsonAnswer(res, 200, modelList(["open.gguf"])),
    );
    cleanups.push(() => open.close());
    const invite = await createInvite(system);
    const refused = await post("/hosters/register", {
      name: "Open Server",
      email: `open-${randomToken(6)}@example.com`,
      endpoint_url: open.url,
      api_key: "a-token-it-ignores",
      invite_code: invite,
      models: [{ model_id: "open.gguf", context_window: 4096 }],
    });
    expect(refused.status).toBe(400);
    const { error } = (await refused.json()) as { error: { message: string; code: string; param: string } };
    expect(error.code).toBe("invalid_request");
    expect(error.param).toBe("endpoint_url");
    expect(error.message).toMatch(/without/i);
    expect(refused.headers.getSetCookie()).toEqual([]);

    // The same invite still registers a properly protected server.
    const server = await startRealHoster({ models: ["closed.gguf"] });
    cleanups.push(() => server.close());
    const ok = await post("/hosters/register", {
      name: "Closed Server",
      email: `closed-${randomToken(6)}@example.com`,
      endpoint_url: server.url,
      api_key: server.token,
      invite_code: invite,
      models: [{ model_id: "closed.gguf", context_window: 4096 }],
    });
    expect(ok.status).toBe(201);

    // ... and is spent now.
    const again = await post("/hosters/register", {
      name: "Second",
      email: `second-${randomToken(6)}@example.com`,
      endpoint_url: server.url,
      api_key: server.token,
      invite_code: invite,
      models: [{ model_id: "closed.gguf", context_window: 4096 }],
    });
    expect(again.status).toBe(400);
    expect(await again.json()).toMatchObject({ error: { code: "invalid_request", param: "invite_code" } });
  });

  it("refuses bad bodies with 400 naming the field, and extra fields", async () => {
    const base = {
      name: "X",
      email: `x-${randomToken(6)}@example.com`,
      endpoint_url: "http://127.0.0.1:1",
      api_key: "token-123456",
      invite_code: "inv_nope",
      models: [{ model_id: "m", context_window: 4096 }],
    };
    for (const [body, param] of [
      [{ ...base, endpoint_url: "ftp://example.com" }, "endpoint_url"],
      [{ ...base, models: [] }, "models"],
      [{ ...base, models: [{ model_id: "m", context_window: 0 }] }, "models[0].context_window"],
      [{ ...base, models: [{ model_id: "m", context_window: 1, canonical_id: "a/b/c" }] }, "models[0].canonical_id"],
      [{ ...base, models: [{ model_id: "m", context_window: 1, quantization: "4 bit" }] }, "models[0].quantization"],
      [{ ...base, hoster_id: "h_1" }, "hoster_id"],
    ] as const) {
      const res = await post("/hosters/register", body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      const { error } = (await res.json()) as { error: { code: string; param: string } };
      expect(error.code).toBe("invalid_request");
      expect(error.param).toBe(param);
    }
  });
});

describe("PATCH /hosters/me/models", () => {
  it("renames the public model a hoster's model serves and its quantization, by the registration's rules", async () => {
    const hoster = await registerHoster(system, { name: "Renaming GPUs" });
    cleanups.push(() => hoster.server.close());
    const patch = (body: unknown) =>
      apiCall(system.url, "PATCH", "/hosters/me/models", { cookie: hoster.cookie, body });

    const renamed = await patch({ model_id: hoster.modelId, canonical_id: "meta-llama/Meta-Llama-3-8B-Instruct" });
    expect(renamed.status).toBe(200);
    expect(renamed.body).toMatchObject({
      model_id: hoster.modelId,
      canonical_id: "meta-llama/Meta-Llama-3-8B-Instruct",
      quantization: "unknown",
    });
    const requantized = await patch({ model_id: hoster.modelId, quantization: "FP8" });
    expect(requantized.body).toMatchObject({
      canonical_id: "meta-llama/Meta-Llama-3-8B-Instruct",
      quantization: "fp8",
    });
    const me = await apiCall(system.url, "GET", "/hosters/me", { cookie: hoster.cookie });
    expect((me.body.models as unknown[])[0]).toMatchObject({ quantization: "fp8" });

    for (const [body, status, param] of [
      [{ model_id: hoster.modelId, canonical_id: "a/b/c" }, 400, "canonical_id"],
      [{ model_id: hoster.modelId, quantization: "4 bit" }, 400, "quantization"],
      [{ model_id: hoster.modelId, context_window: 1 }, 400, "context_window"],
      [{ model_id: "not-mine.gguf", quantization: "int4" }, 404, "model_id"],
    ] as const) {
      const res = await patch(body);
      expect({ body, status: res.status }).toEqual({ body, status });
      expect(res.body).toMatchObject({ error: { param } });
    }
    // A customer cannot.
    const { apiKey } = await signUp(system.url);
    const refused = await fetch(`${system.url}/hosters/me/models`, {
      method: "PATCH",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model_id: hoster.modelId, quantization: "int4" }),
    });
    expect(refused.status).toBe(401);
  });
});

describe("hoster sessions", () => {
  it("keep customers and strangers out of the hoster's pages", async () => {
    expect((await fetch(`${system.url}/hosters/me`)).status).toBe(401);
    const { email } = await signUp(system.url);
    const customer = await post("/auth/login", { email, password: "correct horse battery staple" });
    const customerCookie = (customer.headers.getSetCookie()[0] ?? "").split(";")[0]!;
    const denied = await fetch(`${system.url}/hosters/me`, { headers: { cookie: customerCookie } });
    expect(denied.status).toBe(403);
    expect(await denied.json()).toMatchObject({ error: { type: "permission_error", code: "forbidden" } });
  });

  it("refuse a state-changing request with the cookie from a foreign Origin (CSRF), and die on logout", async () => {
    const hoster = await registerHoster(system);
    cleanups.push(() => hoster.server.close());
    const forged = await fetch(`${system.url}/hosters/logout`, {
      method: "POST",
      headers: { cookie: hoster.cookie, origin: "https://evil.example" },
    });
    expect(forged.status).toBe(403);
    // The forged logout did nothing.
    expect((await fetch(`${system.url}/hosters/me`, { headers: { cookie: hoster.cookie } })).status).toBe(200);

    const out = await fetch(`${system.url}/hosters/logout`, {
      method: "POST",
      headers: { cookie: hoster.cookie, origin: system.url },
    });
    expect(out.status).toBe(200);
    expect((await fetch(`${system.url}/hosters/me`, { headers: { cookie: hoster.cookie } })).status).toBe(401);

    // Logging in again with the registered password gives a fresh session.
    const login = await post("/hosters/login", { email: hoster.email, password: hoster.password });
    expect(login.status).toBe(200);
    const cookie = (login.headers.getSetCookie()[0] ?? "").split(";")[0]!;
    expect(cookie).not.toBe(hoster.cookie);
    expect((await fetch(`${system.url}/hosters/me`, { headers: { cookie } })).status).toBe(200);
  });
});

describe("GET /metrics on the edge", () => {
  /** The samples of a Prometheus text exposition, keyed by name and labels. */
  async function scrape(): Promise<Map<string, number>> {
    const res = await fetch(`${system.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
    const samples = new Map<string, number>();
    for (const line of (await res.text()).split("\n")) {
      if (line === "" || line.startsWith("#")) continue;
      const at = line.lastIndexOf(" ");
      samples.set(line.slice(0, at), Number(line.slice(at + 1)));
    }
    return samples;
  }

  /** Scrapes around `act`: how much each sample grew, and the samples after. */
  async function growthDuring(act: () => Promise<void>) {
    const before = await scrape();
    await act();
    const after = await scrape();
    return { after, grew: (sample: string) => (after.get(sample) ?? 0) - (before.get(sample) ?? 0) };
  }

  it("counts requests by route pattern and status, never by raw URL, with process metrics", async () => {
    const keyId = `key_${randomToken(8)}`;
    const stray = `/no-such-page-${randomToken(8)}`;
    const { after, grew } = await growthDuring(async () => {
      expect((await fetch(`${system.url}/healthz`)).status).toBe(200);
      expect((await fetch(`${system.url}/v1/keys/${keyId}`, { method: "DELETE" })).status).toBe(401);
      expect((await fetch(`${system.url}${stray}`)).status).toBe(404);
    });
    expect(grew('mkt_http_requests_total{method="GET",route="/healthz",status="200"}')).toBe(1);
    expect(grew('mkt_http_requests_total{method="DELETE",route="/v1/keys/:key_id",status="401"}')).toBe(1);
    expect(grew('mkt_http_requests_total{method="GET",route="unmatched",status="404"}')).toBe(1);
    expect(grew('mkt_http_request_duration_seconds_count{method="GET",route="/healthz"}')).toBe(1);
    expect(after.has("process_resident_memory_bytes")).toBe(true);
    const names = [...after.keys()].join("\n");
    expect(names).not.toContain(keyId);
    expect(names).not.toContain(stray);
  });

  it("times each chat completion's admission and its first event, by stream or not", async () => {
    const { apiKey } = await signUp(system.url);
    const chat = (body: Record<string, unknown>) =>
      post(
        "/v1/chat/completions",
        { messages: [{ role: "user", content: "hi" }], ...body },
        { authorization: `Bearer ${apiKey}` },
      );
    const { grew } = await growthDuring(async () => {
      const answered = await chat({ model: "auto" });
      expect(answered.status).toBe(200);
      await answered.json();
      const streamed = await chat({ model: "auto", stream: true });
      expect(streamed.status).toBe(200);
      expect((await streamed.text()).trimEnd().endsWith("data: [DONE]")).toBe(true);
      // Refused before admission: neither step is observed.
      expect((await chat({ model: `no-such-model-${randomToken(4)}` })).status).toBe(404);
    });
    expect(grew("mkt_chat_admit_seconds_count")).toBe(2);
    expect(grew('mkt_chat_admit_seconds_bucket{le="+Inf"}')).toBe(2);
    expect(grew("mkt_chat_admit_seconds_sum")).toBeGreaterThan(0);
    // A fresh account is cold: its first admission asked billing for a lease.
    expect(grew("mkt_lease_grant_seconds_count")).toBeGreaterThanOrEqual(1);
    expect(grew('mkt_chat_first_event_seconds_count{stream="false"}')).toBe(1);
    expect(grew('mkt_chat_first_event_seconds_count{stream="true"}')).toBe(1);
    // The first event comes after admission, so it cannot have taken less time.
    const firstEvents =
      grew('mkt_chat_first_event_seconds_sum{stream="false"}') +
      grew('mkt_chat_first_event_seconds_sum{stream="true"}');
    expect(firstEvents).toBeGreaterThanOrEqual(grew("mkt_chat_admit_seconds_sum"));
  });
});
