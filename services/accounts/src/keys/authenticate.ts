import { AppError } from "@mkt/runtime/errors";
import type { Principal } from "@mkt/proto/accounts/v1/accounts";
import type { AccountsContext } from "../context.ts";
import { hashKey, looksLikeKey } from "./key-secret.ts";
import { checkedEdgeId, livePrincipals } from "./principal-rows.ts";

/**
 * Resolves a bearer key to its principal (docs/architecture.md#authentication): one indexed lookup
 * by the key's hash, which records `edgeId` (the caching edge) as a holder of the key. Every
 * failure is the same error, and the key itself is never logged or echoed.
 */
export async function authenticate(ctx: AccountsContext, apiKey: string, edgeId = ""): Promise<Principal> {
  const invalid = () => new AppError("invalid_api_key", "Invalid API key.");
  // Garbage (other vendors' keys, empty headers) costs no query.
  if (!looksLikeKey(apiKey)) throw invalid();
  const holder = { edgeId: checkedEdgeId(edgeId), ttlMs: ctx.config.PRINCIPAL_TTL_MS, lock: true };
  const [principal] = await livePrincipals(ctx.orm.em.fork(), ctx.clock(), "k.key_hash = ?", [hashKey(apiKey)], holder);
  if (!principal) throw invalid();
  return principal;
}
