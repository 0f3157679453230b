import type { FastifyInstance } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import {
  CreateApiKeyRequest,
  ListApiKeysRequest,
  RevokeApiKeyRequest,
  type ApiKey,
} from "@mkt/proto/accounts/v1/accounts";
import { ListKeyLimitsRequest, SetKeyLimitRequest, type KeyLimit } from "@mkt/proto/billing/v1/billing";
import {
  keyLimitProperties,
  keyLimitResponseProperties,
  limitOf,
  renderKeyLimit,
  type KeyLimitBody,
} from "./key-limit-body.ts";
import { principalOf } from "../plugins/api-key-auth.ts";
import type { RouteDeps } from "./route-deps.ts";
import { noStore } from "../plugins/security-headers.ts";
import { boolean, listOf, nullableString, object, replies, string } from "./response-schemas.ts";

/** The fields of renderKey and renderKeyLimit. */
export const keyProperties = {
  object: string("`api_key`"),
  key_id: string(),
  name: string(),
  prefix: string(),
  created_at: string(),
  revoked_at: nullableString(),
  subscription_id: nullableString("The subscription of a scoped key"),
  session_key: boolean("A key minted for a portal login session"),
  expires_at: nullableString(),
};
const keySchema = object({ ...keyProperties, ...keyLimitResponseProperties });

/** The public form of a key: never its secret. */
export function renderKey(key: ApiKey | undefined) {
  return {
    object: "api_key",
    key_id: key?.keyId ?? "",
    name: key?.name ?? "",
    prefix: key?.prefix ?? "",
    created_at: key?.createdAt ?? "",
    revoked_at: key?.revokedAt || null,
    // A subscription's scoped key is listed too; it is revoked by cancelling that subscription.
    subscription_id: key?.scope?.subscriptionId || null,
    // A key the portal minted for a login session (its playground): it ends with the session.
    session_key: key?.sessionKey ?? false,
    expires_at: key?.expiresAt || null,
  };
}

/** GET/POST /v1/keys, PATCH and DELETE /v1/keys/{key_id}: the caller's own API keys and their spend limits. */
export function keyRoutes(app: FastifyInstance, deps: RouteDeps): void {
  const auth = deps.auth({ allowScoped: false, acceptSession: true });
  const security = [{ apiKey: [] }];
  const { accounts, billing } = deps.backends;
  const limitsOf = async (accountId: string, keyIds: string[]) =>
    new Map(
      (await billing.listKeyLimits(ListKeyLimitsRequest.fromPartial({ accountId, keyIds }))).limits.map((l) => [
        l.keyId,
        l,
      ]),
    );
  const setLimit = async (accountId: string, keyId: string, body: KeyLimitBody, current?: KeyLimit) =>
    (await billing.setKeyLimit(SetKeyLimitRequest.fromPartial({ accountId, keyId, ...limitOf(body, current) }))).limit;

  app.get(
    "/v1/keys",
    {
      onRequest: auth,
      schema: { summary: "List your API keys", response: replies(200, listOf(keySchema)), tags: ["keys"], security },
    },
    async (request) => {
      const { accountId } = principalOf(request);
      const { keys } = await accounts.listApiKeys(ListApiKeysRequest.fromPartial({ accountId }));
      const limits = await limitsOf(
        accountId,
        keys.map((k) => k.keyId),
      );
      return { object: "list", data: keys.map((k) => ({ ...renderKey(k), ...renderKeyLimit(limits.get(k.keyId)) })) };
    },
  );

  app.post<{ Body: ({ name?: string } & KeyLimitBody) | undefined }>(
    "/v1/keys",
    {
      onRequest: [noStore, auth],
      schema: {
        summary: "Create an API key (its secret is shown once, in this response)",
        response: replies(201, object({ ...keyProperties, api_key: string("The key's secret, shown only here") })),
        tags: ["keys"],
        security,
        body: {
          type: ["object", "null"],
          properties: { name: { type: "string", maxLength: 100 }, ...keyLimitProperties },
        },
      },
    },
    async (request, reply) => {
      const { accountId } = principalOf(request);
      const body = request.body ?? {};
      const created = await accounts.createApiKey(
        CreateApiKeyRequest.fromPartial({ accountId, name: body.name ?? "" }),
      );
      const keyId = created.key?.keyId ?? "";
      let limit: KeyLimit | undefined;
      try {
        // Only a key asked for with a limit costs billing a call (setting one fences the account's leases).
        const limited = (body.limit_usd ?? null) !== null || (body.limit_reset ?? null) !== null;
        limit = limited ? await setLimit(accountId, keyId, body) : undefined;
      } catch (err) {
        // A key asked for with a limit is never left without one: it goes, and the call fails.
        await accounts.revokeApiKey(RevokeApiKeyRequest.fromPartial({ accountId, keyId })).catch(() => undefined);
        throw err;
      }
      return reply.code(201).send({ ...renderKey(created.key), ...renderKeyLimit(limit), api_key: created.apiKey });
    },
  );

  app.patch<{ Params: { key_id: string }; Body: KeyLimitBody }>(
    "/v1/keys/:key_id",
    {
      onRequest: auth,
      schema: {
        summary: "Set or clear an API key's spend limit; every edge enforces it once this answers",
        response: replies(200, keySchema),
        tags: ["keys"],
        security,
        params: { type: "object", properties: { key_id: { type: "string", maxLength: 64 } } },
        body: { type: "object", additionalProperties: false, properties: keyLimitProperties },
      },
    },
    async (request) => {
      const { accountId } = principalOf(request);
      const { keys } = await accounts.listApiKeys(ListApiKeysRequest.fromPartial({ accountId }));
      const key = keys.find((k) => k.keyId === request.params.key_id && !k.revokedAt);
      if (!key) throw new AppError("not_found", "No such API key.");
      const current = (await limitsOf(accountId, [key.keyId])).get(key.keyId);
      const limit = await setLimit(accountId, key.keyId, request.body, current);
      return { ...renderKey(key), ...renderKeyLimit(limit) };
    },
  );

  app.delete<{ Params: { key_id: string } }>(
    "/v1/keys/:key_id",
    {
      onRequest: auth,
      schema: {
        summary: "Revoke an API key; calls with it stop at once",
        response: replies(200, object(keyProperties)),
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
