/**
 * Scenario 6: sparse accounts, the common case of a marketplace: many accounts each sending a
 * request now and then. Account i sends one non-streaming request every `everyMs`, its first at
 * i × everyMs / accounts (so the accounts' requests are spread evenly in time), for `durationMs`.
 * Billing's `mkt_lease_grants_total{result="granted"}` before and after says how many requests
 * waited on a GrantLease: an idle lease that stays open (LEASE_IDLE_MS) makes it about one per
 * account, its first.
 */
import type { Pool } from "undici";
import { sendOne, type RequestRecord, type Target } from "./load.ts";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `mkt_lease_grants_total{result="granted"}` as billing's metrics endpoint says now. */
export async function grantsCounted(billingMetricsUrl: string): Promise<number> {
  const text = await (await fetch(billingMetricsUrl)).text();
  const line = text.split("\n").find((l) => l.startsWith('mkt_lease_grants_total{result="granted"}'));
  if (!line) throw new Error(`no mkt_lease_grants_total at ${billingMetricsUrl}`);
  return Number(line.split(" ")[1]);
}

/** The requests of every account on its schedule; `key` of each record is its account's index. */
export async function sparseAccounts(
  pool: Pool,
  target: Target,
  options: { accounts: number; everyMs: number; durationMs: number; body: string; scenario: string },
): Promise<RequestRecord[]> {
  const records: RequestRecord[] = [];
  const started = performance.now();
  const perAccount = Math.max(1, Math.round(options.durationMs / options.everyMs));
  const account = async (i: number) => {
    const offset = (i * options.everyMs) / options.accounts;
    for (let n = 0; n < perAccount; n++) {
      const wait = started + offset + n * options.everyMs - performance.now();
      if (wait > 0) await sleep(wait);
      records.push(await sendOne(pool, target, i, options.body, options.scenario, false, i));
    }
  };
  await Promise.all(Array.from({ length: options.accounts }, (_, i) => account(i)));
  return records;
}
