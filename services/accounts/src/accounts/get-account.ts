import { AppError } from "@mkt/runtime/errors";
import type { GetAccountResponse } from "@mkt/proto/accounts/v1/accounts";
import { isUuid, type AccountsContext } from "../context.ts";
import { Account } from "./account.entity.ts";

/** One account by id; a malformed id is simply not found (ids come from URLs). */
export async function getAccount(ctx: AccountsContext, accountId: string): Promise<GetAccountResponse> {
  const notFound = () => new AppError("not_found", "No such account.");
  if (!isUuid(accountId)) throw notFound();
  const account = await ctx.orm.em.fork().findOne(Account, { id: accountId });
  if (!account) throw notFound();
  return {
    account: {
      accountId: account.id,
      email: account.email,
      tier: account.tier,
      createdAt: account.createdAt.toISOString(),
    },
  };
}
