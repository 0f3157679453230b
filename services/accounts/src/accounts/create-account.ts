import { AppError } from "@mkt/runtime/errors";
import { newId } from "@mkt/runtime/ids";
import type { CreateAccountRequest, CreateAccountResponse } from "@mkt/proto/accounts/v1/accounts";
import type { AccountsContext } from "../context.ts";
import { DEFAULT_KEY_NAME, issueKey } from "../keys/api-keys.ts";
import { hashPassword, validatePassword } from "../passwords.ts";
import type { IpAttempts } from "../ip-attempts.ts";
import { Account } from "./account.entity.ts";
import { cleanEmail, normalizeEmail, validateEmail } from "./email.ts";

/**
 * Sign-up: counts the attempt against the client IP's limit, validates, then creates the account
 * and its first key in one transaction, so an account never exists without a usable key.
 */
export async function createAccount(
  ctx: AccountsContext,
  attempts: IpAttempts,
  req: CreateAccountRequest,
): Promise<CreateAccountResponse> {
  await attempts.hit("signup", req.clientIp, ctx.config.SIGNUP_LIMIT_PER_IP_PER_HOUR);
  validateEmail(req.email);
  validatePassword(req.password);
  // Hashing takes tens of milliseconds: done before the transaction, which then stays short.
  const passwordHash = await hashPassword(req.password);

  return ctx.orm.em.fork().transactional(async (em) => {
    // Concurrent sign-ups with one address race on the unique email_normalized: the later ones
    // wait for the first to commit, then insert nothing and are told the address is taken.
    const rows = await em.execute(
      `insert into accounts (id, email, email_normalized, password_hash, tier) values (?, ?, ?, ?, ?)
       on conflict (email_normalized) do nothing returning *`,
      [newId(), cleanEmail(req.email), normalizeEmail(req.email), passwordHash, ctx.config.DEFAULT_TIER],
    );
    if (!rows[0]) throw new AppError("email_taken", "An account with this e-mail already exists.");
    const account = em.map(Account, rows[0]);
    const { key, secret } = await issueKey(em, account.id, DEFAULT_KEY_NAME);
    return {
      account: {
        accountId: account.id,
        email: account.email,
        tier: account.tier,
        createdAt: account.createdAt.toISOString(),
      },
      key,
      apiKey: secret,
    };
  });
}
