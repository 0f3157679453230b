import { AppError } from "@mkt/runtime/errors";
import { isUuid } from "@mkt/runtime/ids";
import type { Principal } from "@mkt/proto/accounts/v1/accounts";
import type { AccountsContext } from "../context.ts";
import { checkedEdgeId, livePrincipals } from "./principal-rows.ts";

/** The most key ids one RevalidateKeys call takes (an edge with more cached splits them). */
export const MAX_KEYS_PER_REVALIDATION = 10_000;

/**
 * The current principals of those of `keyIds` still live (docs/architecture.md#authentication): an
 * edge re-checks every principal it has in use with this, every half of PRINCIPAL_TTL_MS, in one call and
 * one query by primary key, which keeps `edgeId` recorded as their holder. Revoked, expired,
 * unknown and malformed ids are left out of the answer.
 */
export async function revalidateKeys(ctx: AccountsContext, keyIds: string[], edgeId = ""): Promise<Principal[]> {
  if (keyIds.length > MAX_KEYS_PER_REVALIDATION) {
    throw new AppError("invalid_request", `At most ${MAX_KEYS_PER_REVALIDATION} key ids per call.`, {
      param: "key_ids",
    });
  }
  const ids = [...new Set(keyIds.filter(isUuid).map((id) => id.toLowerCase()))];
  if (ids.length === 0) return [];
  const holder = { edgeId: checkedEdgeId(edgeId), ttlMs: ctx.config.PRINCIPAL_TTL_MS, lock: false };
  return livePrincipals(ctx.orm.em.fork(), ctx.clock(), "k.id in (?)", [ids], holder);
}
