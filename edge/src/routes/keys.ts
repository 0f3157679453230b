import type { FastifyInstance } from "fastify";
import {
  CreateApiKeyRequest,
  ListApiKeysRequest,
  RevokeApiKeyRequest,
  type ApiKey,
} from "@mkt/proto/accounts/v1/accounts";
import { principalOf } from "../plugins/api-key-auth.ts";
import type { RouteDeps } from "./route-deps.ts";

/** The public form of a key: never its secret. */
function renderKey(key: ApiKey | undefined) {
  return {
    object: "api_key",
    key_id: key?.keyId ?? "",
    name: key?.name ?? "",
    prefix: key?.prefix ?? "",
    created_at: key?.createdAt ?? "",
    revoked_at: key?.revokedAt || null,
    // A subscription's scoped key is listed too; it is revoked by cancelling that subscription.
    subscription_id: key?.scope?.subscriptionId || null,
  };
}

/** GET/POST /v1/keys and DELETE /v1/keys/{key_id}: the caller's own API keys. */
export function keyRoutes(app: FastifyInstance, deps: RouteDeps): void {
  const auth = deps.auth({ allowScoped: false });
  const security = [{ apiKey: [] }];

  app.get(
    "/v1/keys",
    { onRequest: auth, schema: { summary: "List your API keys", tags: ["keys"], security } },
    async (request) => {
      const { keys } = await deps.backends.accounts.listApiKeys(
        ListApiKeysRequest.fromPartial({ accountId: principalOf(request).accountId }),
      );
      return { object: "list", data: keys.map(renderKey) };
    },
  );

  app.post<{ Body: { name?: string } | undefined }>(
    "/v1/keys",
    {
      onRequest: auth,
      schema: {
        summary: "Create an API key (its secret is shown once, in this response)",
        tags: ["keys"],
        security,
        body: { type: ["object", "null"], properties: { name: { type: "string", maxLength: 100 } } },
      },
    },
    async (request, reply) => {
      const created = await deps.backends.accounts.createApiKey(
        CreateApiKeyRequest.fromPartial({ accountId: principalOf(request).accountId, name: request.body?.name ?? "" }),
      );
      return reply.code(201).send({ ...renderKey(created.key), api_key: created.apiKey });
    },
  );

  app.delete<{ Params: { key_id: string } }>(
    "/v1/keys/:key_id",
    {
      onRequest: auth,
      schema: {
        summary: "Revoke an API key; calls with it stop at once",
        tags: ["keys"],
        security,
        params: { type: "object", properties: { key_id: { type: "string", maxLength: 64 } } },
      },
    },
    async (request) => {
      const { key } = await deps.backends.accounts.revokeApiKey(
        RevokeApiKeyRequest.fromPartial({ accountId: principalOf(request).accountId, keyId: request.params.key_id }),
      );
      return renderKey(key);
    },
  );
}
