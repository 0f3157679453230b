import { AppError } from "@mkt/runtime/errors";
import { isUuid, randomToken } from "@mkt/runtime/ids";
import type { RegisterHosterLoginRequest, RegisterHosterLoginResponse } from "@mkt/proto/accounts/v1/accounts";
import { cleanEmail, normalizeEmail, validateEmail } from "../accounts/email.ts";
import type { AccountsContext } from "../context.ts";
import { consumeInvite, invalidInvite } from "../invites/invites.ts";
import { hashPassword, validatePassword } from "../passwords.ts";

/**
 * The last step of hoster registration (registry has checked the hoster's server): consumes the
 * invite and creates the login in one transaction, so a code is spent only by a registration
 * that completes, and exactly one of many concurrent registrations with it succeeds.
 */
export async function registerHosterLogin(
  ctx: AccountsContext,
  req: RegisterHosterLoginRequest,
): Promise<RegisterHosterLoginResponse> {
  if (!isUuid(req.hosterId)) throw new AppError("invalid_request", "hoster_id must be a UUID.", { param: "hoster_id" });
  validateEmail(req.email);
  // No password given: the hoster gets a generated one, shown once in the response.
  const portalPassword = req.password === "" ? randomToken(18) : "";
  const password = portalPassword || req.password;
  validatePassword(password);
  const passwordHash = await hashPassword(password);

  return ctx.orm.em.fork().transactional(async (em) => {
    if (!(await consumeInvite(em, req.inviteCode, req.hosterId, ctx.clock()))) throw invalidInvite();
    const rows = await em.execute(
      `insert into hoster_logins (hoster_id, email, email_normalized, password_hash) values (?, ?, ?, ?)
       on conflict (email_normalized) do nothing returning hoster_id`,
      [req.hosterId, cleanEmail(req.email), normalizeEmail(req.email), passwordHash],
    );
    // Throwing rolls the invite back: it stays usable for a registration with another address.
    if (rows.length === 0) throw new AppError("email_taken", "A hoster with this e-mail is already registered.");
    ctx.log.info({ hosterId: req.hosterId }, "hoster login created");
    return { hosterId: req.hosterId, email: cleanEmail(req.email), portalPassword };
  });
}
