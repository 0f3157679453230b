import { defineEntity, p } from "@mikro-orm/core";

/**
 * One balanced movement of money, unique on (kind, reference): a grant per account, a top-up or a
 * subscription fee per its key, and one `usage_batch` per settled batch (a fresh reference each).
 * A request's charge is proven by its usage record, not by an entry (docs/adr/0040-one-journal-entry-per-settled-batch.md).
 */
export const JournalEntry = defineEntity({
  name: "JournalEntry",
  tableName: "journal_entries",
  properties: {
    id: p.uuid().primary(),
    kind: p.text(),
    reference: p.text(),
    createdAt: p.datetime(),
  },
});

/** One leg of a journal entry, keyed on (entry, ledger account); the legs of an entry sum to zero. */
export const LedgerPosting = defineEntity({
  name: "LedgerPosting",
  tableName: "ledger_postings",
  properties: {
    entryId: p.uuid().primary(),
    ledgerAccount: p.text().primary(),
    amountMicros: p.bigint("bigint"),
    createdAt: p.datetime(),
  },
});
