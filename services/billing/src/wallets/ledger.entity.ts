import { defineEntity, p } from "@mikro-orm/core";

/** One balanced movement of money; (kind, reference) is unique, which makes it exactly-once. */
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

/** One leg of a journal entry; the legs of an entry sum to zero. */
export const LedgerPosting = defineEntity({
  name: "LedgerPosting",
  tableName: "ledger_postings",
  properties: {
    id: p.uuid().primary(),
    entryId: p.uuid(),
    ledgerAccount: p.text(),
    amountMicros: p.bigint("bigint"),
    createdAt: p.datetime(),
  },
});
