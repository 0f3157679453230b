const whole = new Intl.NumberFormat("en-US");

/**
 * Dollars as a person reads them: cents for balances, more digits for amounts under a cent.
 * `exact` keeps every digit down to the micro-dollar (the ledger's unit) at any size, for the
 * cost of one answer, which must read as what was charged, not rounded to the cent.
 */
export function usd(amount: number | null | undefined, { exact = false } = {}): string {
  if (amount === null || amount === undefined) return "–";
  const digits = exact || (amount !== 0 && Math.abs(amount) < 0.01) ? 6 : 2;
  return `$${amount.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: digits })}`;
}

export function count(n: number | null | undefined): string {
  return n === null || n === undefined ? "–" : whole.format(n);
}

/** "1 subscriber", "2 subscribers": a count with its noun (one that takes an s). */
export function plural(n: number, noun: string): string {
  return `${count(n)} ${n === 1 ? noun : `${noun}s`}`;
}

/** A date and time in the reader's own time zone. */
export function when(iso: string | null | undefined): string {
  if (!iso) return "–";
  return new Date(iso).toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "short" });
}

export function day(iso: string | null | undefined): string {
  if (!iso) return "–";
  return new Date(iso).toLocaleDateString("en-GB", { dateStyle: "medium" });
}
