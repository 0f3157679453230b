import { splitRevenue, type Micros } from "@mkt/runtime/money";
import { ledgerAccounts, type JournalEntry } from "../wallets/ledger.ts";

/**
 * One request's charge (docs/adr/0004-platform-keeps-20-percent.md): the customer pays `cost`,
 * split into the platform's fee and the hoster's earning (a hoster's model only). The entry (none
 * for a request that costs nothing) is keyed on the request id: settlement posts it once, with the
 * usage record, and an entry that exists already means the request was settled, which only a usage
 * record may say. The split goes on the usage record.
 */
export function usageCharge(charge: {
  requestId: string;
  accountId: string;
  provider: string;
  hosterId: string;
  cost: Micros;
}): { platformFee: Micros; hosterEarned: Micros; entry: JournalEntry | undefined } {
  const split = splitRevenue(charge.cost, charge.provider === "hoster");
  const entry: JournalEntry | undefined =
    charge.cost > 0n
      ? {
          kind: "usage",
          reference: charge.requestId,
          legs: [
            [ledgerAccounts.customer(charge.accountId), -charge.cost],
            [ledgerAccounts.revenue, split.platformFee],
            [ledgerAccounts.hoster(charge.hosterId), split.hosterEarned],
          ],
        }
      : undefined;
  return { ...split, entry };
}
