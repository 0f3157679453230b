import { randomToken } from "@mkt/runtime/ids";
import { startRealHoster } from "../../services/registry/test/hoster-servers.ts";
import { apiCall } from "./api-call.ts";
import { signUp, type RunningSystem } from "./system.ts";

/** Creates one invite code through the admin API. */
export async function createInvite(system: RunningSystem): Promise<string> {
  const res = await fetch(`${system.url}/admin/invites`, {
    method: "POST",
    headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({ count: 1 }),
  });
  if (res.status !== 201) throw new Error(`invite failed: ${res.status} ${await res.text()}`);
  const { data } = (await res.json()) as { data: Array<{ invite_code: string }> };
  return data[0]!.invite_code;
}

/** A hoster's OpenAI-compatible server on loopback: where it listens and the api_key it requires. */
export interface HosterServer {
  url: string;
  token: string;
  close(): Promise<void>;
}

export interface RegisteredHoster {
  hosterId: string;
  email: string;
  password: string;
  /** `mk_session=...`, ready for a Cookie header. */
  cookie: string;
  /** The server it registered (the reference hoster-server unless `startServer` said); close it when done. */
  server: HosterServer;
  modelId: string;
  /** The headers of the registration's answer. */
  registrationHeaders: Headers;
}

/**
 * Registers a real hoster-server (started here, on loopback) through POST /hosters/register, as a
 * hoster would: invite from the admin API, then registration, which logs the hoster in.
 * `serverEnv` configures the hoster-server (DEMO_TOKENS_PER_SECOND: a slow, streaming model);
 * `startServer` starts another server serving `modelId` instead (a test upstream); `model` adds
 * fields to the registered model's entry (canonical_id, quantization, ...).
 */
export async function registerHoster(
  system: RunningSystem,
  options: {
    modelId?: string;
    name?: string;
    serverEnv?: Record<string, string>;
    startServer?: (modelId: string) => Promise<HosterServer>;
    model?: Record<string, unknown>;
  } = {},
): Promise<RegisteredHoster> {
  const modelId = options.modelId ?? `llama-${randomToken(4)}.gguf`;
  const server = options.startServer
    ? await options.startServer(modelId)
    : await startRealHoster({ models: [modelId], env: options.serverEnv });
  const email = `hoster-${randomToken(6)}@example.com`;
  const password = "hoster password 123";
  const res = await fetch(`${system.url}/hosters/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      name: options.name ?? "Test Hoster",
      email,
      endpoint_url: server.url,
      api_key: server.token,
      invite_code: await createInvite(system),
      password,
      models: [{ model_id: modelId, model_alias: "Llama 3 8B", context_window: 8192, ...options.model }],
    }),
  });
  if (res.status !== 201) {
    await server.close();
    throw new Error(`registration failed: ${res.status} ${await res.text()}`);
  }
  const { hoster_id } = (await res.json()) as { hoster_id: string };
  const cookie = (res.headers.getSetCookie()[0] ?? "").split(";")[0]!;
  return { hosterId: hoster_id, email, password, cookie, server, modelId, registrationHeaders: res.headers };
}

/**
 * A free plan of `hoster` with the given limits, and a new customer subscribed to it: returns the
 * subscription's scoped key and the customer (an Error when either step is refused).
 */
export async function subscribeToFreePlan(
  system: RunningSystem,
  hoster: RegisteredHoster,
  limits: { rpmLimit: number; maxConcurrent: number; tpmLimit?: number },
): Promise<{ scopedKey: string; subscriber: Awaited<ReturnType<typeof signUp>> }> {
  const plan = await apiCall(system.url, "POST", "/hosters/products", {
    cookie: hoster.cookie,
    body: {
      name: "Free",
      pricing_model: "free",
      rpm_limit: limits.rpmLimit,
      max_concurrent: limits.maxConcurrent,
      ...(limits.tpmLimit === undefined ? {} : { tpm_limit: limits.tpmLimit }),
    },
  });
  if (plan.status !== 201) throw new Error(`plan refused: ${plan.status} ${JSON.stringify(plan.body)}`);
  const subscriber = await signUp(system.url);
  const subscription = await apiCall(system.url, "POST", "/v1/subscriptions", {
    key: subscriber.apiKey,
    body: { product_id: plan.body.product_id },
  });
  if (subscription.status !== 201) {
    throw new Error(`subscription refused: ${subscription.status} ${JSON.stringify(subscription.body)}`);
  }
  return { scopedKey: subscription.body.api_key as string, subscriber };
}

/**
 * A hoster's model on an open plan (docs/routing.md): registers the hoster (as registerHoster, its
 * model's `canonical_id` given) and publishes one open plan with `plan`'s terms over payg defaults.
 * `onServer` points the registration at a server already running (a test upstream shared by
 * several hosters), which closing the hoster leaves alone.
 */
export async function registerOpenHoster(
  system: RunningSystem,
  options: {
    name: string;
    canonicalId: string;
    plan: Record<string, unknown>;
    modelId?: string;
    quantization?: string;
    onServer?: { url: string; token: string };
    serverEnv?: Record<string, string>;
  },
): Promise<RegisteredHoster> {
  const shared = options.onServer;
  const hoster = await registerHoster(system, {
    name: options.name,
    modelId: options.modelId,
    serverEnv: options.serverEnv,
    model: { canonical_id: options.canonicalId, quantization: options.quantization ?? "bf16" },
    startServer: shared ? async () => ({ ...shared, close: async () => {} }) : undefined,
  });
  const plan = await apiCall(system.url, "POST", "/hosters/products", {
    cookie: hoster.cookie,
    body: { name: `${options.name} open`, pricing_model: "payg", open: true, ...options.plan },
  });
  if (plan.status !== 201) {
    await hoster.server.close();
    throw new Error(`the open plan was refused: ${plan.status} ${JSON.stringify(plan.body)}`);
  }
  return hoster;
}
