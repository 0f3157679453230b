import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ServiceError } from "@grpc/grpc-js";
import { AppError } from "@mkt/runtime/errors";
import { SecretBox, parseSecretsKey } from "@mkt/runtime/secret-box";
import { HosterModel, type RegisterHosterRequest } from "@mkt/proto/registry/v1/registry";
import { startHarness, type Harness } from "./registry-harness.ts";
import { jsonAnswer, modelList, startRealHoster, startScriptedHoster } from "./hoster-servers.ts";

const MODEL = "llama-3-8b.Q4_K_M.gguf";

let h: Harness;
let db: pg.Client;
beforeAll(async () => {
  h = await startHarness();
  db = new pg.Client({ connectionString: h.databaseUrl });
  await db.connect();
});
afterAll(async () => {
  await db.end();
  await h.close();
});

let emails = 0;
/** One model entry of a registration: `m`, 1 token of context, every other field left to its default. */
const model = (m: Partial<HosterModel>) => HosterModel.fromPartial({ modelId: "m", contextWindow: 1n, ...m });

function request(endpointUrl: string, apiKey: string, overrides: Partial<RegisterHosterRequest> = {}) {
  return {
    name: "Acme GPUs",
    email: `hoster${++emails}@example.com`,
    endpointUrl,
    apiKey,
    inviteCode: h.accounts.invite(),
    password: "",
    clientIp: "203.0.113.7",
    models: [model({ modelId: MODEL, modelAlias: "Llama 3 8B", contextWindow: 8192n })],
    ...overrides,
  } satisfies RegisterHosterRequest;
}

/** The AppError a registration fails with. */
async function refusal(req: RegisterHosterRequest): Promise<AppError> {
  try {
    await h.client.registerHoster(req);
  } catch (err) {
    return AppError.fromGrpc(err as ServiceError);
  }
  throw new Error("registration unexpectedly succeeded");
}

const hosterRows = async () => (await db.query("select * from registry.hosters")).rows;

describe("RegisterHoster", () => {
  it("registers a hoster whose server passes every check, storing its token sealed", async () => {
    const server = await startRealHoster({ models: [MODEL, "qwen2.5-7b"] });
    try {
      const req = request(`${server.url}/`, server.token, {
        models: [
          model({
            modelId: MODEL,
            modelAlias: "Llama 3 8B",
            contextWindow: 8192n,
            maxN: 4n,
            canonicalId: " meta-llama/Meta-Llama-3-8B-Instruct ",
            quantization: "Q4_K_M",
          }),
          model({ modelId: "qwen2.5-7b", contextWindow: 32768n, kind: "embedding" }),
        ],
      });
      const { hoster, portalPassword } = await h.client.registerHoster(req);
      // No kind is chat, no max_n one choice, no canonical_id the model_id, no quantization unknown.
      const declared = Object.fromEntries(
        hoster!.models.map((m) => [m.modelId, [m.kind, m.maxN, m.canonicalId, m.quantization]]),
      );
      expect(declared).toEqual({
        [MODEL]: ["chat", 4n, "meta-llama/Meta-Llama-3-8B-Instruct", "q4_k_m"],
        "qwen2.5-7b": ["embedding", 1n, "qwen2.5-7b", "unknown"],
      });
      expect(hoster).toMatchObject({
        name: "Acme GPUs",
        endpointUrl: server.url,
        status: "healthy",
        consecutiveFailures: 0,
      });
      expect(hoster!.models.map((m) => m.modelId).sort()).toEqual([MODEL, "qwen2.5-7b"].sort());
      expect(hoster!.lastCheckedAt).not.toBe("");
      expect(portalPassword.length).toBeGreaterThanOrEqual(16);
      expect(h.accounts.consumedBy(req.inviteCode)).toBe(hoster!.hosterId);

      const [row] = (await db.query("select * from registry.hosters where id = $1", [hoster!.hosterId])).rows;
      expect(row.status).toBe("healthy");
      expect(JSON.stringify(row)).not.toContain(server.token);
      const box = new SecretBox(parseSecretsKey(h.secretsKey));
      expect(box.open(row.api_key_sealed, `hoster:${hoster!.hosterId}:api_key`)).toBe(server.token);
      const models = await db.query("select * from registry.hoster_models where hoster_id = $1", [hoster!.hosterId]);
      expect(models.rowCount).toBe(2);

      expect((await h.client.getHoster({ hosterId: hoster!.hosterId })).hoster).toEqual(hoster);
      expect((await h.client.listHosters({})).hosters.map((x) => x.hosterId)).toContain(hoster!.hosterId);
      expect(h.logLines.join("\n")).not.toContain(server.token);
    } finally {
      await server.close();
    }
  });

  it("rejects a server that answers /v1/models without a token", async () => {
    const open = await startScriptedHoster((req, res) =>
      req.url === "/health" ? jsonAnswer(res, 200, { status: "ok" }) : jsonAnswer(res, 200, modelList([MODEL])),
    );
    try {
      const before = await hosterRows();
      const req = request(open.url, "hoster-token-123456");
      const err = await refusal(req);
      expect(err.code).toBe("invalid_request");
      expect(err.message).toBe("Your server answered /v1/models without a token; it must require the bearer token.");
      expect(await hosterRows()).toEqual(before);
      expect(h.accounts.consumedBy(req.inviteCode)).toBeUndefined();
    } finally {
      await open.close();
    }
  });

  it("rejects a server that does not list a registered model, naming it", async () => {
    const server = await startRealHoster({ models: [MODEL] });
    try {
      const err = await refusal(
        request(server.url, server.token, {
          models: [
            model({ modelId: MODEL, contextWindow: 8192n }),
            model({ modelId: "mistral-7b", contextWindow: 8192n }),
          ],
        }),
      );
      expect(err.code).toBe("invalid_request");
      expect(err.param).toBe("models[1].model_id");
      expect(err.message).toContain('"mistral-7b"');
    } finally {
      await server.close();
    }
  });

  it("rejects a server whose /health fails, and a wrong token, never echoing token or body", async () => {
    const sick = await startScriptedHoster((_req, res) => jsonAnswer(res, 503, { error: "disk on fire SECRETBODY" }));
    const server = await startRealHoster();
    try {
      const health = await refusal(request(sick.url, "hoster-token-123456"));
      expect(health.param).toBe("endpoint_url");
      expect(health.message).toBe("Your server answered GET /health with status 503; it must answer 2xx.");
      const wrongToken = await refusal(request(server.url, "not-the-right-token"));
      expect(wrongToken.param).toBe("api_key");
      expect(wrongToken.message).not.toContain("not-the-right-token");
      expect(h.logLines.join("\n")).not.toContain("SECRETBODY");
    } finally {
      await sick.close();
      await server.close();
    }
  });

  it("stops at a bad invite code before any call to the hoster's server", async () => {
    const recorder = await startScriptedHoster((_req, res) => jsonAnswer(res, 200, modelList([MODEL])));
    try {
      const err = await refusal(request(recorder.url, "hoster-token-123456", { inviteCode: "inv_nope" }));
      expect(err.code).toBe("invalid_request");
      expect(err.param).toBe("invite_code");
      expect(recorder.requests).toEqual([]);
      expect(h.accounts.calls.at(-1)).toEqual({
        method: "CheckInvite",
        inviteCode: "inv_nope",
        clientIp: "203.0.113.7",
      });
    } finally {
      await recorder.close();
    }
  });

  it("leaves no hoster row when accounts refuses the login, passing its error on", async () => {
    const server = await startRealHoster();
    try {
      const first = request(server.url, server.token);
      await h.client.registerHoster(first);
      const before = await hosterRows();
      const again = request(server.url, server.token, { email: first.email.toUpperCase() });
      const err = await refusal(again);
      expect(err.code).toBe("email_taken");
      expect(await hosterRows()).toEqual(before);
      // The invite was not spent: the hoster can retry with another address.
      expect(h.accounts.consumedBy(again.inviteCode)).toBeUndefined();
    } finally {
      await server.close();
    }
  });

  it("lets exactly one of several concurrent registrations with one invite code through", async () => {
    const server = await startRealHoster();
    try {
      const inviteCode = h.accounts.invite();
      const before = (await hosterRows()).length;
      const results = await Promise.allSettled(
        Array.from({ length: 3 }, () => h.client.registerHoster(request(server.url, server.token, { inviteCode }))),
      );
      const won = results.filter((r) => r.status === "fulfilled");
      expect(won).toHaveLength(1);
      for (const lost of results.filter((r) => r.status === "rejected")) {
        expect(AppError.fromGrpc(lost.reason as ServiceError)).toMatchObject({ param: "invite_code" });
      }
      const rows = await hosterRows();
      expect(rows).toHaveLength(before + 1);
      expect(rows.filter((r) => r.status === "registering")).toEqual([]);
    } finally {
      await server.close();
    }
  });

  it.each([
    ["name", { name: " " }, "name"],
    ["name too long", { name: "x".repeat(101) }, "name"],
    ["email", { email: "nope" }, "email"],
    ["endpoint_url", { endpointUrl: "ftp://example.com" }, "endpoint_url"],
    ["credentials in the URL", { endpointUrl: "https://u:p@example.com" }, "endpoint_url"],
    ["api_key too short", { apiKey: "short" }, "api_key"],
    ["api_key with a newline", { apiKey: "token-123456\r\nx-evil: 1" }, "api_key"],
    ["no models", { models: [] }, "models"],
    ["too many models", { models: Array.from({ length: 51 }, (_, i) => model({ modelId: `m${i}` })) }, "models"],
    ["bad model_id", { models: [model({ modelId: "a b" })] }, "models[0].model_id"],
    ["duplicate model_id", { models: [model({}), model({})] }, "models[1].model_id"],
    ["context_window 0", { models: [model({ contextWindow: 0n })] }, "models[0].context_window"],
    ["kind", { models: [model({ kind: "image" })] }, "models[0].kind"],
    ["max_n", { models: [model({ maxN: 129n })] }, "models[0].max_n"],
    ["context_window huge", { models: [model({ contextWindow: 10_000_001n })] }, "models[0].context_window"],
    ["canonical_id with two /", { models: [model({ canonicalId: "a/b/c" })] }, "models[0].canonical_id"],
    ["canonical_id with an empty part", { models: [model({ canonicalId: "meta-llama/" })] }, "models[0].canonical_id"],
    ["canonical_id too long", { models: [model({ canonicalId: "x".repeat(129) })] }, "models[0].canonical_id"],
    ["quantization", { models: [model({ quantization: "4 bit" })] }, "models[0].quantization"],
  ])("refuses a bad %s with param %s before calling anyone", async (_case, overrides, param) => {
    const calls = h.accounts.calls.length;
    const err = await refusal(request("http://127.0.0.1:9", "hoster-token-123456", overrides));
    expect(err.code).toBe("invalid_request");
    expect(err.param).toBe(param);
    expect(h.accounts.calls.length).toBe(calls);
  });

  it("answers not_found for an unknown or malformed hoster id", async () => {
    for (const hosterId of ["00000000-0000-4000-8000-000000000000", "nope"]) {
      const err = await h.client.getHoster({ hosterId }).catch((e: unknown) => AppError.fromGrpc(e));
      expect((err as AppError).code).toBe("not_found");
    }
  });
});

describe("RegisterHoster without ALLOW_PRIVATE_UPSTREAMS", () => {
  it("refuses a loopback endpoint after the invite check and before any call to it", async () => {
    const strict = await startHarness({ ALLOW_PRIVATE_UPSTREAMS: "false" });
    const server = await startScriptedHoster((_req, res) => jsonAnswer(res, 200, modelList([MODEL])));
    try {
      for (const url of [server.url, server.url.replace("127.0.0.1", "localhost")]) {
        const inviteCode = strict.accounts.invite();
        const err = await strict.client
          .registerHoster({ ...request(url, "hoster-token-123456"), inviteCode })
          .catch((e: unknown) => AppError.fromGrpc(e));
        expect(err).toMatchObject({ code: "invalid_request", param: "endpoint_url" });
        expect((err as AppError).message).toMatch(/must be a public address/);
        expect(strict.accounts.calls.at(-1)?.method).toBe("CheckInvite");
      }
      expect(server.requests).toEqual([]);
    } finally {
      await server.close();
      await strict.close();
    }
  });
});
