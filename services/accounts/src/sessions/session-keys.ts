import { AppError } from "@mkt/runtime/errors";
import type { CreateSessionKeyResponse } from "@mkt/proto/accounts/v1/accounts";
import type { AccountsContext } from "../context.ts";
import { issueKey, lockAccountUnderKeyCap } from "../keys/api-keys.ts";
import { announceRevocation } from "../keys/revoke-api-key.ts";
import { hashSecret } from "../secret-hash.ts";
import { liveSessionRow, SESSION_TOKEN_RE } from "./sessions.ts";

/** How a session key is named in the key list. */
export const SESSION_KEY_NAME = "Portal playground (this login session)";

/**
 * A key for the portal's playground (docs/portal.md#how-it-talks-to-the-api): the page chats with
 * the public API like any client, so it needs a key, but a key the person never handles. It ends
 * with the session (`expires_at`), and logout revokes it.
 */
export async function createSessionKey(ctx: AccountsContext, token: string): Promise<CreateSessionKeyResponse> {
  const session = await liveSessionRow(ctx, token);
  if (session.kind !== "customer") throw new AppError("forbidden", "Only a customer session can have a session key.");
  return ctx.orm.em.fork().transactional(async (em) => {
    await lockAccountUnderKeyCap(em, session.subject_id, ctx.clock());
    const { key, secret } = await issueKey(em, session.subject_id, SESSION_KEY_NAME, {
      id: session.id,
      expiresAt: new Date(session.expires_at),
    });
    return { key, apiKey: secret };
  });
}

/** Ends the session and revokes its keys, each announced like any revocation. Idempotent. */
export async function endSession(ctx: AccountsContext, token: string): Promise<void> {
  if (!SESSION_TOKEN_RE.test(token)) return;
  const em = ctx.orm.em.fork();
  const now = ctx.clock();
  const [session] = await em.execute(
    `update sessions set ended_at = coalesce(ended_at, ?) where token_hash = ? returning id`,
    [now, hashSecret(token)],
  );
  if (!session) return;
  const revoked = await em.execute(
    `update api_keys set revoked_at = coalesce(revoked_at, ?) where session_id = ? returning id, account_id`,
    [now, session.id],
  );
  for (const key of revoked) await announceRevocation(ctx, key.id as string, key.account_id as string);
}
