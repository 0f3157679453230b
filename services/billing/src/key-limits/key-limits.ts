import { performance } from "node:perf_hooks";
import { AppError } from "@mkt/runtime/errors";
import { isUuid } from "@mkt/runtime/ids";
import type {
  KeyLimit,
  ListKeyLimitsRequest,
  ListKeyLimitsResponse,
  SetKeyLimitRequest,
  SetKeyLimitResponse,
} from "@mkt/proto/billing/v1/billing";
import type { BillingContext, Em } from "../context.ts";
import { int8 } from "../context.ts";
import { fenceLeases } from "../leases/fence-leases.ts";
import { spentInWindow } from "../leases/key-room.ts";
import { fenceWaitMs } from "@mkt/runtime/fence-wait";
import { foldQueued } from "../usage/rollup-fold.ts";
import { keyWindow, LIMIT_RESETS, neverResets, utcOffsetTime, type LimitReset } from "./key-windows.ts";

/** Keys GET /v1/keys may name at once (an account has a handful; this bounds the statement). */
const MAX_KEYS = 1000;

function uuidField(value: string, param: string): void {
  if (!isUuid(value)) throw new AppError("invalid_request", `${param} must be a UUID`, { param });
}

/**
 * Sets or clears a key's spend limit (SetKeyLimit in billing.proto). The account's open leases are
 * fenced in the same transaction: their key budgets list the old limits and they may hold room
 * sized by them, so the edges take new leases, sized by the new limit. Answers once the holders
 * acked their recall or one TTL + margin passed (docs/architecture.md#revocation-stops-at-once):
 * then no edge admits by the old one.
 */
export async function setKeyLimit(ctx: BillingContext, req: SetKeyLimitRequest): Promise<SetKeyLimitResponse> {
  uuidField(req.accountId, "account_id");
  uuidField(req.keyId, "key_id");
  if (req.limitMicros !== undefined && req.limitMicros < 0n) {
    throw new AppError("invalid_request", "limit_usd must be zero or more", { param: "limit_usd" });
  }
  if (req.limitReset && !(LIMIT_RESETS as readonly string[]).includes(req.limitReset)) {
    throw new AppError("invalid_request", "limit_reset must be daily, weekly, monthly or null", {
      param: "limit_reset",
    });
  }
  const reset = (req.limitReset || null) as LimitReset;
  const now = ctx.clock();
  const holders = await ctx.orm.em.fork().transactional(async (em) => {
    // The wallet's lock first (fenceLeases takes it), the order grants and settlement take it in.
    await em.execute(`select account_id from wallets where account_id = ? for update`, [req.accountId]);
    const [before] = await em.execute(`select account_id, limit_micros from key_limits where key_id = ?`, [req.keyId]);
    if (before && before.account_id !== req.accountId) throw new AppError("not_found", "No such API key.");
    // A key that had no limit and still has none changes no lease's key budgets.
    const unchanged = (before?.limit_micros ?? null) === null && req.limitMicros === undefined;
    const fenced = unchanged ? [] : await fenceLeases(em, req.accountId);
    // Settlement writes a limited key's spend itself but queues an unlimited one's with the
    // rollups: spend queued while the key had no limit is folded before the limit counts it.
    if ((before?.limit_micros ?? null) === null && req.limitMicros !== undefined) {
      while ((await foldQueued(em, { skipLocked: false })) > 0);
    }
    await em.execute(
      `insert into key_limits (key_id, account_id, limit_micros, limit_reset, updated_at) values (?, ?, ?, ?, ?)
       on conflict (key_id) do update set limit_micros = excluded.limit_micros, limit_reset = excluded.limit_reset,
         updated_at = excluded.updated_at`,
      [req.keyId, req.accountId, req.limitMicros ?? null, reset, now],
    );
    return fenced;
  });
  if (holders.length > 0) {
    await ctx.recallLeases(holders, "", performance.now() + fenceWaitMs(ctx.config.LEASE_TTL_MS));
  }
  const [limit] = (await listKeyLimits(ctx, { accountId: req.accountId, keyIds: [req.keyId] })).limits;
  return { limit };
}

/** Each named key's limit and settled spend in its current window (ListKeyLimits in billing.proto). */
export async function listKeyLimits(ctx: BillingContext, req: ListKeyLimitsRequest): Promise<ListKeyLimitsResponse> {
  uuidField(req.accountId, "account_id");
  const keyIds = [...new Set(req.keyIds.filter(isUuid))].slice(0, MAX_KEYS);
  if (keyIds.length === 0) return { limits: [] };
  const em = ctx.orm.em.fork();
  const rows = await em.execute(
    `select key_id, limit_micros::text as limit_micros, limit_reset from key_limits
     where account_id = ? and key_id in (${keyIds.map(() => "?").join(", ")})`,
    [req.accountId, ...keyIds],
  );
  const byKey = new Map(rows.map((row) => [row.key_id as string, row]));
  const now = ctx.clock();
  const limits: KeyLimit[] = [];
  for (const keyId of keyIds) limits.push(await keyLimitOf(em, keyId, byKey.get(keyId), now));
  return { limits };
}

async function keyLimitOf(em: Em, keyId: string, row: Record<string, unknown> | undefined, now: Date) {
  const limited = row?.limit_micros !== null && row?.limit_micros !== undefined;
  const reset = limited ? ((row.limit_reset as LimitReset | null) ?? null) : null;
  const window = keyWindow(reset, now);
  return {
    keyId,
    limitMicros: limited ? int8(row.limit_micros) : undefined,
    limitReset: reset ?? "",
    spentMicros: await spentInWindow(em, keyId, window),
    resetsAt: neverResets(window) ? "" : utcOffsetTime(window.end),
  };
}
