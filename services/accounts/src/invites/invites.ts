import { AppError } from "@mkt/runtime/errors";
import { newId } from "@mkt/runtime/ids";
import type { CheckInviteRequest, CreateInviteResponse } from "@mkt/proto/accounts/v1/accounts";
import type { AccountsContext, Em } from "../context.ts";
import type { IpAttempts } from "../ip-attempts.ts";
import { hashSecret } from "../secret-hash.ts";
import { looksLikeInviteCode, newInviteCode } from "./invite-code.ts";

export const invalidInvite = () =>
  new AppError("invalid_request", "The invite code is not valid or has already been used.", {
    param: "invite_code",
  });

/** A new single-use code; the caller (an operator) sees it once, the database keeps its hash. */
export async function createInvite(ctx: AccountsContext): Promise<CreateInviteResponse> {
  const code = newInviteCode();
  const createdAt = ctx.clock();
  await ctx.orm.em
    .fork()
    .execute(`insert into invites (id, code_hash, created_at) values (?, ?, ?)`, [
      newId(),
      hashSecret(code),
      createdAt,
    ]);
  ctx.log.info("invite code created");
  return { inviteCode: code, createdAt: createdAt.toISOString() };
}

/**
 * Checks a code before registration calls the hoster's server. An IP past its hour's budget of
 * failed codes is refused before the lookup, so codes cannot be guessed by volume.
 */
export async function checkInvite(ctx: AccountsContext, attempts: IpAttempts, req: CheckInviteRequest): Promise<void> {
  const limit = ctx.config.INVITE_FAILURES_PER_IP_PER_HOUR;
  await attempts.refuseIfOver("invite", req.clientIp, limit);
  const usable =
    looksLikeInviteCode(req.inviteCode) &&
    (
      await ctx.orm.em
        .fork()
        .execute(`select 1 from invites where code_hash = ? and consumed_at is null`, [hashSecret(req.inviteCode)])
    ).length > 0;
  if (!usable) {
    await attempts.hit("invite", req.clientIp, limit);
    throw invalidInvite();
  }
}

/**
 * Marks the code used by `hosterId` inside the caller's transaction. Concurrent consumers of one
 * code queue on its row; after the first commits, the others see it consumed and get nothing.
 */
export async function consumeInvite(em: Em, code: string, hosterId: string, now: Date): Promise<boolean> {
  if (!looksLikeInviteCode(code)) return false;
  const rows = await em.execute(
    `update invites set consumed_at = ?, hoster_id = ? where code_hash = ? and consumed_at is null returning id`,
    [now, hosterId, hashSecret(code)],
  );
  return rows.length > 0;
}
