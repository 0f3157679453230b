import { AppError } from "@mkt/runtime/errors";
import { clientIpKey } from "./client-ip-key.ts";
import type { AccountsContext } from "./context.ts";

const HOUR_MS = 3_600_000;
const MAX_CLIENT_IP_CHARS = 100;

/** What is counted per client IP: every sign-up, and failed invite codes and logins. */
export type AttemptPurpose = "signup" | "invite" | "login";

const DESCRIPTIONS: Record<AttemptPurpose, string> = {
  signup: "sign-up attempts",
  invite: "failed invite codes",
  login: "failed logins",
};

/** The UTC hour `now` falls in and the whole seconds until it ends (at least 1). */
export function attemptWindow(now: Date): { start: Date; resetSeconds: number } {
  const ms = now.getTime();
  const start = Math.floor(ms / HOUR_MS) * HOUR_MS;
  return { start: new Date(start), resetSeconds: Math.max(1, Math.ceil((start + HOUR_MS - ms) / 1000)) };
}

export interface IpAttempts {
  /** Counts one attempt; refuses it (429) when it is over `limit` for the hour. */
  hit(purpose: AttemptPurpose, clientIp: string, limit: number): Promise<void>;
  /** Refuses (429) when the hour's attempts already reached `limit`; counts nothing. */
  refuseIfOver(purpose: AttemptPurpose, clientIp: string, limit: number): Promise<void>;
}

function cleanIp(clientIp: string): string {
  const ip = clientIp.trim();
  if (ip.length > MAX_CLIENT_IP_CHARS) {
    throw new AppError("invalid_request", "client_ip is not an IP address.", { param: "client_ip" });
  }
  // A caller that sends no IP shares the empty bucket: limited together, never unlimited.
  // An IPv6 address counts as its /64 (one host owns one): see clientIpKey.
  return clientIpKey(ip);
}

function tooMany(purpose: AttemptPurpose, limit: number, resetSeconds: number): AppError {
  return new AppError(
    "rate_limit_exceeded",
    `Too many ${DESCRIPTIONS[purpose]} from this address: at most ${limit} per hour. Try again in ${resetSeconds}s.`,
    { headers: { "retry-after": String(resetSeconds) } },
  );
}

/**
 * Per-IP hourly counters. A count is its own committed statement, never part of the guarded
 * operation's transaction, so a failed attempt still counts. A limit of 0 turns a check off.
 */
export function ipAttempts(ctx: AccountsContext): IpAttempts {
  let prunedUpTo = 0;

  async function prune(windowStart: Date): Promise<void> {
    // Old windows only take space. Pruning once per hour and process is plenty; it keeps the
    // previous hour too, so a replica whose clock runs behind still counts in a window it sees.
    const pruneBefore = windowStart.getTime() - HOUR_MS;
    if (pruneBefore <= prunedUpTo) return;
    prunedUpTo = pruneBefore;
    await ctx.orm.em.fork().execute(`delete from ip_attempts where window_start < ?`, [new Date(pruneBefore)]);
  }

  return {
    async hit(purpose, clientIp, limit) {
      if (limit === 0) return;
      const ip = cleanIp(clientIp);
      const window = attemptWindow(ctx.clock());
      await prune(window.start);
      const rows = await ctx.orm.em.fork().execute(
        `insert into ip_attempts (purpose, client_ip, window_start, attempts) values (?, ?, ?, 1)
         on conflict (purpose, client_ip, window_start) do update set attempts = ip_attempts.attempts + 1
         returning attempts`,
        [purpose, ip, window.start],
      );
      if (Number(rows[0]?.attempts) > limit) throw tooMany(purpose, limit, window.resetSeconds);
    },

    async refuseIfOver(purpose, clientIp, limit) {
      if (limit === 0) return;
      const ip = cleanIp(clientIp);
      const window = attemptWindow(ctx.clock());
      const rows = await ctx.orm.em
        .fork()
        .execute(`select attempts from ip_attempts where purpose = ? and client_ip = ? and window_start = ?`, [
          purpose,
          ip,
          window.start,
        ]);
      if (Number(rows[0]?.attempts ?? 0) >= limit) throw tooMany(purpose, limit, window.resetSeconds);
    },
  };
}
