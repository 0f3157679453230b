import { AppError } from "@mkt/runtime/errors";
import { newId, randomToken } from "@mkt/runtime/ids";
import type {
  LoginRequest,
  LoginResponse,
  ResolveSessionResponse,
  Session as SessionMessage,
} from "@mkt/proto/accounts/v1/accounts";
import { normalizeEmail, validateLoginEmail } from "../accounts/email.ts";
import type { AccountsContext } from "../context.ts";
import type { IpAttempts } from "../ip-attempts.ts";
import { hashPassword, PASSWORD_MAX_CHARS, verifyPassword } from "../passwords.ts";
import { hashSecret } from "../secret-hash.ts";

export type SessionKind = "customer" | "hoster";

/** `mks_` + base64url of 32 random bytes: the cookie value. */
export const SESSION_TOKEN_RE = /^mks_[A-Za-z0-9_-]{40,100}$/;

const wrongCredentials = () => new AppError("invalid_credentials", "Wrong e-mail or password.");
const notLoggedIn = () => new AppError("unauthenticated", "Not logged in, or the session has expired.");

// Unknown e-mails are checked against this hash too, so a login takes as long whether or not
// the address exists (no account enumeration by timing).
let decoyHash: Promise<string> | undefined;

const LOGIN_TABLES: Record<SessionKind, { table: string; id: string }> = {
  customer: { table: "accounts", id: "id" },
  hoster: { table: "hoster_logins", id: "hoster_id" },
};

function render(row: { kind: string; subject_id: string; email: string; expires_at: Date | string }): SessionMessage {
  return {
    kind: row.kind,
    subjectId: row.subject_id,
    email: row.email,
    expiresAt: new Date(row.expires_at).toISOString(),
  };
}

/**
 * E-mail and password → a new session. Failed logins count against the client IP's hourly
 * budget, which is checked before any password work.
 */
export async function login(ctx: AccountsContext, attempts: IpAttempts, req: LoginRequest): Promise<LoginResponse> {
  if (req.kind !== "customer" && req.kind !== "hoster") {
    throw new AppError("invalid_request", "kind must be customer or hoster.", { param: "kind" });
  }
  validateLoginEmail(req.email);
  const limit = ctx.config.LOGIN_FAILURES_PER_IP_PER_HOUR;
  await attempts.refuseIfOver("login", req.clientIp, limit);
  const { table, id } = LOGIN_TABLES[req.kind];
  const em = ctx.orm.em.fork();
  const [row] = await em.execute(
    `select ${id} as subject_id, email, password_hash from ${table} where email_normalized = ?`,
    [normalizeEmail(req.email)],
  );
  decoyHash ??= hashPassword(randomToken(16));
  const stored = (row?.password_hash as string | undefined) ?? (await decoyHash);
  const ok = [...req.password].length <= PASSWORD_MAX_CHARS && (await verifyPassword(req.password, stored));
  if (!row || !ok) {
    await attempts.hit("login", req.clientIp, limit);
    throw wrongCredentials();
  }

  const token = `mks_${randomToken(32)}`;
  const now = ctx.clock();
  const session = {
    kind: req.kind,
    subject_id: row.subject_id as string,
    email: row.email as string,
    expires_at: new Date(now.getTime() + ctx.config.SESSION_TTL_HOURS * 3_600_000),
  };
  await em.execute(
    `insert into sessions (id, token_hash, kind, subject_id, email, created_at, expires_at) values (?, ?, ?, ?, ?, ?, ?)`,
    [newId(), hashSecret(token), session.kind, session.subject_id, session.email, now, session.expires_at],
  );
  ctx.log.info({ kind: req.kind, subjectId: session.subject_id }, "logged in");
  return { sessionToken: token, session: render(session) };
}

interface SessionRow {
  id: string;
  kind: string;
  subject_id: string;
  email: string;
  expires_at: Date | string;
  /** The account's tier, for a customer session. */
  tier: string | null;
}

/** The live session row a cookie token stands for; unauthenticated when there is none. */
export async function liveSessionRow(ctx: AccountsContext, token: string): Promise<SessionRow> {
  if (!SESSION_TOKEN_RE.test(token)) throw notLoggedIn();
  const [row] = await ctx.orm.em.fork().execute(
    `select s.id, s.kind, s.subject_id, s.email, s.expires_at, a.tier from sessions s
       left join accounts a on s.kind = 'customer' and a.id = s.subject_id
      where s.token_hash = ? and s.ended_at is null and s.expires_at > ?`,
    [hashSecret(token), ctx.clock()],
  );
  if (!row) throw notLoggedIn();
  return row as SessionRow;
}

/** The live session a cookie token stands for, and whom a customer session acts as. */
export async function resolveSession(ctx: AccountsContext, token: string): Promise<ResolveSessionResponse> {
  const row = await liveSessionRow(ctx, token);
  const principal =
    row.kind === "customer" && row.tier !== null
      ? { accountId: row.subject_id, email: row.email, keyId: "", tier: row.tier, scope: undefined }
      : undefined;
  return { session: render(row), principal };
}
