import { unary } from "@mkt/runtime/grpc-server";
import type { AccountsServiceServer } from "@mkt/proto/accounts/v1/accounts";
import type { AccountsContext } from "./context.ts";
import { createAccount } from "./accounts/create-account.ts";
import { getAccount, getAccounts } from "./accounts/get-account.ts";
import { authenticate } from "./keys/authenticate.ts";
import { createApiKey, listApiKeys } from "./keys/api-keys.ts";
import { revalidateKeys } from "./keys/revalidate-keys.ts";
import { revokeApiKey } from "./keys/revoke-api-key.ts";
import { issueScopedKey, revokeScopedKey } from "./keys/scoped-keys.ts";
import { registerHosterLogin } from "./hosters/register-hoster-login.ts";
import { checkInvite, createInvite } from "./invites/invites.ts";
import { ipAttempts } from "./ip-attempts.ts";
import { createSessionKey, endSession } from "./sessions/session-keys.ts";
import { login, resolveSession } from "./sessions/sessions.ts";

/** The AccountsService gRPC handlers. Errors other than AppError answer INTERNAL, generically. */
export function accountsService(ctx: AccountsContext): AccountsServiceServer {
  const attempts = ipAttempts(ctx);
  const log = ctx.log;
  return {
    createAccount: unary(log, "CreateAccount", (req) => createAccount(ctx, attempts, req)),
    authenticate: unary(log, "Authenticate", async (req) => ({
      principal: await authenticate(ctx, req.apiKey, req.edgeId),
      // The edge trusts the principal this long (accounts owns it: docs/architecture.md#authentication).
      principalTtlMs: BigInt(ctx.config.PRINCIPAL_TTL_MS),
    })),
    revalidateKeys: unary(log, "RevalidateKeys", async (req) => ({
      principals: await revalidateKeys(ctx, req.keyIds, req.edgeId),
      principalTtlMs: BigInt(ctx.config.PRINCIPAL_TTL_MS),
    })),
    createApiKey: unary(log, "CreateApiKey", (req) => createApiKey(ctx, req)),
    listApiKeys: unary(log, "ListApiKeys", (req) => listApiKeys(ctx, req.accountId)),
    revokeApiKey: unary(log, "RevokeApiKey", (req) => revokeApiKey(ctx, req)),
    issueScopedKey: unary(log, "IssueScopedKey", (req) => issueScopedKey(ctx, req)),
    revokeScopedKey: unary(log, "RevokeScopedKey", (req) => revokeScopedKey(ctx, req)),
    getAccount: unary(log, "GetAccount", (req) => getAccount(ctx, req.accountId)),
    getAccounts: unary(log, "GetAccounts", (req) => getAccounts(ctx, req.accountIds)),
    createInvite: unary(log, "CreateInvite", () => createInvite(ctx)),
    checkInvite: unary(log, "CheckInvite", async (req) => {
      await checkInvite(ctx, attempts, req);
      return {};
    }),
    registerHosterLogin: unary(log, "RegisterHosterLogin", (req) => registerHosterLogin(ctx, req)),
    login: unary(log, "Login", (req) => login(ctx, attempts, req)),
    logout: unary(log, "Logout", async (req) => {
      await endSession(ctx, req.sessionToken);
      return {};
    }),
    resolveSession: unary(log, "ResolveSession", (req) => resolveSession(ctx, req.sessionToken)),
    createSessionKey: unary(log, "CreateSessionKey", (req) => createSessionKey(ctx, req.sessionToken)),
  };
}
