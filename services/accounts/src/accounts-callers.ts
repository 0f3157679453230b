import type { CallerTable } from "@mkt/runtime/caller-policy";
import type { AccountsServiceServer } from "@mkt/proto/accounts/v1/accounts";

/**
 * Who may call each AccountsService RPC (enforced with mTLS on: packages/runtime/src/caller-policy.ts).
 * The edge serves the public routes; billing's subscription saga issues and revokes scoped keys
 * and masks subscribers' e-mails; registry's hoster registration checks the invite and makes the login.
 */
export const ACCOUNTS_CALLERS = {
  createAccount: ["edge"],
  authenticate: ["edge"],
  revalidateKeys: ["edge"],
  createApiKey: ["edge"],
  listApiKeys: ["edge"],
  revokeApiKey: ["edge"],
  issueScopedKey: ["billing"],
  revokeScopedKey: ["billing"],
  getAccount: ["edge"],
  getAccounts: ["billing"],
  createInvite: ["edge"],
  checkInvite: ["registry"],
  registerHosterLogin: ["registry"],
  login: ["edge"],
  logout: ["edge"],
  resolveSession: ["edge"],
  createSessionKey: ["edge"],
} as const satisfies CallerTable<AccountsServiceServer>;
