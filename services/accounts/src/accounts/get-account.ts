import { isUuid } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import type {
  Account as AccountMessage,
  GetAccountResponse,
  GetAccountsResponse,
} from "@mkt/proto/accounts/v1/accounts";
import type { AccountsContext } from "../context.ts";
import { Account } from "./account.entity.ts";

/** The most ids one GetAccounts call takes (a hoster's subscriber list is read in pages of this). */
export const MAX_ACCOUNTS_PER_CALL = 1000;

type AccountRow = { id: string; email: string; tier: string; createdAt: Date };

function accountMessage(account: AccountRow): AccountMessage {
  return {
    accountId: account.id,
    email: account.email,
    tier: account.tier,
    createdAt: account.createdAt.toISOString(),
  };
}

/** One account by id; a malformed id is simply not found (ids come from URLs). */
export async function getAccount(ctx: AccountsContext, accountId: string): Promise<GetAccountResponse> {
  const notFound = () => new AppError("not_found", "No such account.");
  if (!isUuid(accountId)) throw notFound();
  const account = await ctx.orm.em.fork().findOne(Account, { id: accountId });
  if (!account) throw notFound();
  return { account: accountMessage(account) };
}

/** Several accounts in one query; unknown and malformed ids are left out, duplicates answered once. */
export async function getAccounts(ctx: AccountsContext, accountIds: string[]): Promise<GetAccountsResponse> {
  if (accountIds.length > MAX_ACCOUNTS_PER_CALL) {
    throw new AppError("invalid_request", `At most ${MAX_ACCOUNTS_PER_CALL} account ids per call.`, {
      param: "account_ids",
    });
  }
  const ids = [...new Set(accountIds.filter(isUuid).map((id) => id.toLowerCase()))];
  if (ids.length === 0) return { accounts: [] };
  const accounts = await ctx.orm.em.fork().find(Account, { id: { $in: ids } }, { orderBy: { id: "asc" } });
  return { accounts: accounts.map(accountMessage) };
}
