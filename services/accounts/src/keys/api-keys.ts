import type { InferEntity } from "@mikro-orm/core";
import { AppError } from "@mkt/runtime/errors";
import { isUuid, newId } from "@mkt/runtime/ids";
import type {
  ApiKey as ApiKeyMessage,
  CreateApiKeyRequest,
  CreateApiKeyResponse,
  ListApiKeysResponse,
} from "@mkt/proto/accounts/v1/accounts";
import { Account } from "../accounts/account.entity.ts";
import type { AccountsContext, Em } from "../context.ts";
import { ApiKey } from "./api-key.entity.ts";
import { newKeySecret } from "./key-secret.ts";

export type ApiKeyRow = InferEntity<typeof ApiKey>;

/** Keeps one account's key list (and what a leaked login could mint) bounded. */
export const MAX_ACTIVE_KEYS = 100;
const MAX_NAME_CHARS = 100;
export const DEFAULT_KEY_NAME = "default";

/** A key as the API shows it: never the secret, only its prefix. */
export function apiKeyMessage(key: ApiKeyRow): ApiKeyMessage {
  return {
    keyId: key.id,
    name: key.name,
    prefix: key.prefix,
    createdAt: key.createdAt.toISOString(),
    revokedAt: key.revokedAt ? key.revokedAt.toISOString() : "",
    scope: key.subscriptionId
      ? { subscriptionId: key.subscriptionId, productId: key.productId ?? "", hosterId: key.hosterId ?? "" }
      : undefined,
    expiresAt: key.expiresAt ? key.expiresAt.toISOString() : "",
    sessionKey: key.sessionId != null,
  };
}

/** Stores a new key of the account (its hash only) and returns it with the secret, to show once. */
export async function issueKey(
  em: Em,
  accountId: string,
  name: string,
  session?: { id: string; expiresAt: Date },
): Promise<{ key: ApiKeyMessage; secret: string }> {
  const { secret, prefix, hash } = newKeySecret();
  const rows = await em.execute(
    `insert into api_keys (id, account_id, name, prefix, key_hash, session_id, expires_at)
     values (?, ?, ?, ?, ?, ?, ?) returning *`,
    [newId(), accountId, name, prefix, hash, session?.id ?? null, session?.expiresAt ?? null],
  );
  return { key: apiKeyMessage(em.map(ApiKey, rows[0]!)), secret };
}

export function requireAccountId(accountId: string): void {
  if (!isUuid(accountId)) throw new AppError("invalid_request", "account_id must be a UUID.", { param: "account_id" });
}

/** A key's name: optional (then `fallback`), at most 100 characters, no control characters. */
export function keyName(raw: string, fallback = DEFAULT_KEY_NAME): string {
  const name = raw.trim();
  // eslint-disable-next-line no-control-regex
  if ([...name].length > MAX_NAME_CHARS || /[\x00-\x1f\x7f]/.test(name)) {
    throw new AppError("invalid_request", `name must be at most ${MAX_NAME_CHARS} printable characters.`, {
      param: "name",
    });
  }
  return name || fallback;
}

export async function createApiKey(ctx: AccountsContext, req: CreateApiKeyRequest): Promise<CreateApiKeyResponse> {
  requireAccountId(req.accountId);
  const name = keyName(req.name);
  return ctx.orm.em.fork().transactional(async (em) => {
    await lockAccountUnderKeyCap(em, req.accountId, ctx.clock());
    const { key, secret } = await issueKey(em, req.accountId, name);
    return { key, apiKey: secret };
  });
}

/**
 * Locks the account row, which serializes its key creations so concurrent calls cannot pass the
 * active-key cap together, and refuses when the cap is reached (expired session keys do not count).
 */
export async function lockAccountUnderKeyCap(em: Em, accountId: string, now: Date): Promise<void> {
  const account = await em.execute(`select id from accounts where id = ? for update`, [accountId]);
  if (account.length === 0) throw new AppError("not_found", "No such account.");
  const [row] = await em.execute(
    `select count(*)::int as active from api_keys
      where account_id = ? and revoked_at is null and (expires_at is null or expires_at > ?)`,
    [accountId, now],
  );
  if ((row?.active as number) >= MAX_ACTIVE_KEYS) {
    throw new AppError(
      "invalid_request",
      `An account can have at most ${MAX_ACTIVE_KEYS} active API keys; revoke one before creating another.`,
    );
  }
}

/** The account's keys, revoked ones included, oldest first. */
export async function listApiKeys(ctx: AccountsContext, accountId: string): Promise<ListApiKeysResponse> {
  requireAccountId(accountId);
  const em = ctx.orm.em.fork();
  const keys = await em.find(ApiKey, { accountId }, { orderBy: { createdAt: "asc", id: "asc" } });
  // Every account is created with a key, so an empty list can only mean an unknown account.
  if (keys.length === 0 && (await em.count(Account, { id: accountId })) === 0) {
    throw new AppError("not_found", "No such account.");
  }
  return { keys: keys.map(apiKeyMessage) };
}
