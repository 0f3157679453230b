import type { FastifyInstance } from "fastify";
import { LoginRequest } from "@mkt/proto/accounts/v1/accounts";
import {
  GetHosterRequest,
  ListHostersRequest,
  RegisterHosterRequest,
  UpdateHosterModelRequest,
  type Hoster,
  type HosterModel,
} from "@mkt/proto/registry/v1/registry";
import { principalSession, setSessionCookie } from "../plugins/session-auth.ts";
import { productSchema, renderProduct } from "../products/render-product.ts";
import { renderStats, renderVerification, statsSchema, verificationSchema } from "./endpoint-stats.ts";
import type { RouteDeps } from "./route-deps.ts";
import { noStore } from "../plugins/security-headers.ts";
import { arrayOf, integer, listOf, nullableString, object, replies, string } from "./response-schemas.ts";

interface RegisterBody {
  name: string;
  email: string;
  endpoint_url: string;
  api_key: string;
  invite_code: string;
  password?: string;
  models: Array<{
    model_id: string;
    model_alias?: string;
    context_window: number;
    kind?: "chat" | "embedding";
    max_n?: number;
    canonical_id?: string;
    quantization?: string;
  }>;
}

const renderModel = (m: HosterModel) => ({
  model_id: m.modelId,
  model_alias: m.modelAlias,
  context_window: Number(m.contextWindow),
  kind: m.kind || "chat",
  max_n: m.maxN > 0n ? Number(m.maxN) : 1,
  canonical_id: m.canonicalId || m.modelId,
  quantization: m.quantization || "unknown",
  stats: renderStats(m.stats),
  verification: renderVerification(m.verification),
});

const modelSchema = object({
  model_id: string(),
  model_alias: string(),
  context_window: integer(),
  kind: string("`chat` or `embedding`"),
  max_n: integer("The most choices (`n`) one chat request may ask for"),
  canonical_id: string("The public model it serves, shared by every hoster serving it"),
  quantization: string("How its weights are stored (`unknown` when the hoster did not say)"),
  stats: statsSchema,
  verification: verificationSchema,
});

const hosterProperties = {
  hoster_id: string(),
  name: string(),
  status: string(),
  models: arrayOf(modelSchema),
};

/** The public view of a hoster (GET /v1/hosters): no endpoint, never a token. */
const renderPublic = (h: Hoster) => ({
  hoster_id: h.hosterId,
  name: h.name,
  status: h.status,
  models: h.models.map(renderModel),
});

/**
 * Hoster registration and the hoster's own profile (docs/adr/0032-hoster-registration-and-endpoint-guard.md). Registration is checked and
 * stored by registry (which asks accounts to spend the invite); the edge only translates, then
 * logs the new hoster in.
 */
export function hosterRoutes(app: FastifyInstance, deps: RouteDeps): void {
  app.post<{ Body: RegisterBody }>(
    "/hosters/register",
    {
      onRequest: noStore,
      schema: {
        summary: "Register an inference server with an invite code (no Authorization header)",
        response: replies(
          201,
          object({
            ...hosterProperties,
            portal_password: string("A generated portal password, shown once, when none was given"),
          }),
        ),
        tags: ["hosters"],
        body: {
          type: "object",
          required: ["name", "email", "endpoint_url", "api_key", "invite_code", "models"],
          additionalProperties: false,
          properties: {
            name: { type: "string", minLength: 1, maxLength: 100 },
            email: { type: "string", maxLength: 254 },
            endpoint_url: { type: "string", maxLength: 2048, example: "https://llm.example.com" },
            api_key: { type: "string", minLength: 8, maxLength: 512 },
            invite_code: { type: "string", maxLength: 200 },
            password: { type: "string", maxLength: 256 },
            models: {
              type: "array",
              minItems: 1,
              maxItems: 50,
              items: {
                type: "object",
                required: ["model_id", "context_window"],
                additionalProperties: false,
                properties: {
                  model_id: { type: "string", minLength: 1, maxLength: 128 },
                  model_alias: { type: "string", maxLength: 200 },
                  context_window: { type: "integer", minimum: 1, maximum: 10_000_000 },
                  kind: {
                    type: "string",
                    enum: ["chat", "embedding"],
                    description:
                      "`chat` (default): chat completions; `embedding`: POST /v1/embeddings, which the server must then answer",
                  },
                  max_n: {
                    type: "integer",
                    minimum: 1,
                    maximum: 128,
                    description: "The most choices (`n`) the server answers in one chat request (default 1)",
                  },
                  canonical_id: {
                    type: "string",
                    maxLength: 128,
                    example: "meta-llama/Llama-3.1-8B-Instruct",
                    description:
                      "The model's public name (a Hugging Face repository id, say), shared by every hoster serving it: " +
                      "letters, digits and `. _ : -` with at most one `/` (default: `model_id`)",
                  },
                  quantization: {
                    type: "string",
                    maxLength: 32,
                    example: "q4_k_m",
                    description:
                      "How its weights are stored: `bf16`, `fp16`, `fp8`, `int8`, `int4`, `q4_k_m`, ... (default `unknown`)",
                  },
                },
              },
            },
          },
        },
      },
    },
    async (request, reply) => {
      const body = request.body;
      const { hoster, portalPassword } = await deps.backends.registry.registerHoster(
        RegisterHosterRequest.fromPartial({
          name: body.name,
          email: body.email,
          endpointUrl: body.endpoint_url,
          apiKey: body.api_key,
          inviteCode: body.invite_code,
          password: body.password ?? "",
          clientIp: request.ip,
          models: body.models.map((m) => ({
            modelId: m.model_id,
            modelAlias: m.model_alias ?? "",
            contextWindow: BigInt(m.context_window),
            kind: m.kind ?? "chat",
            maxN: BigInt(m.max_n ?? 1),
            canonicalId: m.canonical_id ?? "",
            quantization: m.quantization ?? "",
          })),
        }),
      );
      // The new hoster is logged in at once, as after any sign-up. The hoster exists already, so
      // a failed login must not turn this into an error that loses a shown-once password.
      try {
        const { sessionToken, session } = await deps.backends.accounts.login(
          LoginRequest.fromPartial({
            email: body.email,
            password: portalPassword || body.password,
            kind: "hoster",
            clientIp: request.ip,
          }),
        );
        setSessionCookie(request, reply, sessionToken, session!.expiresAt);
      } catch (err) {
        request.log.warn({ err, hosterId: hoster!.hosterId }, "registered hoster not logged in");
      }
      return reply.code(201).send({
        ...renderPublic(hoster!),
        ...(portalPassword ? { portal_password: portalPassword } : {}),
      });
    },
  );

  app.get(
    "/hosters/me",
    {
      onRequest: deps.session("hoster"),
      schema: {
        summary: "The logged-in hoster: profile, endpoint, models and health",
        response: replies(
          200,
          object({
            ...hosterProperties,
            email: string(),
            endpoint_url: string(),
            last_checked_at: nullableString(),
            consecutive_failures: integer(),
            usage_mismatches: integer(),
            created_at: string(),
          }),
        ),
        tags: ["hosters"],
      },
    },
    async (request) => {
      const session = principalSession(request);
      const { hoster } = await deps.backends.registry.getHoster(
        GetHosterRequest.fromPartial({ hosterId: session.subjectId }),
      );
      return {
        ...renderPublic(hoster!),
        email: session.email,
        endpoint_url: hoster!.endpointUrl,
        last_checked_at: hoster!.lastCheckedAt || null,
        consecutive_failures: hoster!.consecutiveFailures,
        // Reports that disagreed with the registry's count (docs/adr/0023-usage-mismatches-flagged-not-punished.md):
        // the hoster's own view only, not the public list.
        usage_mismatches: Number(hoster!.usageMismatches),
        created_at: hoster!.createdAt,
      };
    },
  );

  app.patch<{ Body: { model_id: string; canonical_id?: string; quantization?: string } }>(
    "/hosters/me/models",
    {
      onRequest: deps.session("hoster"),
      schema: {
        summary: "Name the public model one of your models serves, or its quantization",
        description:
          "`model_id` names one of your registered models; `canonical_id` and `quantization` follow the rules of " +
          "registration. An absent field keeps its value.",
        body: {
          type: "object",
          required: ["model_id"],
          additionalProperties: false,
          properties: {
            model_id: { type: "string", minLength: 1, maxLength: 128 },
            canonical_id: { type: "string", maxLength: 128, example: "meta-llama/Llama-3.1-8B-Instruct" },
            quantization: { type: "string", maxLength: 32, example: "q4_k_m" },
          },
        },
        response: replies(200, modelSchema),
        tags: ["hosters"],
      },
    },
    async (request) => {
      const { model } = await deps.backends.registry.updateHosterModel(
        UpdateHosterModelRequest.fromPartial({
          hosterId: principalSession(request).subjectId,
          modelId: request.body.model_id,
          canonicalId: request.body.canonical_id,
          quantization: request.body.quantization,
        }),
      );
      return renderModel(model!);
    },
  );

  app.get(
    "/v1/hosters",
    {
      onRequest: deps.auth({ allowScoped: false, acceptSession: true }),
      schema: {
        summary: "Hosters with their status, models and active plans",
        response: replies(200, listOf(object({ ...hosterProperties, plans: arrayOf(productSchema) }))),
        tags: ["hosters"],
        security: [{ apiKey: [] }],
      },
    },
    async () => {
      const { hosters } = await deps.backends.registry.listHosters(ListHostersRequest.fromPartial({}));
      // Only the list carries plans (their active ones): GetHoster has none, so the registration
      // answer and /hosters/me leave them out rather than show an empty list.
      return { object: "list", data: hosters.map((h) => ({ ...renderPublic(h), plans: h.plans.map(renderProduct) })) };
    },
  );
}
