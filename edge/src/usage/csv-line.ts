/**
 * A CSV writer for the export's fixed columns (RFC 4180 quoting, `\n` line ends). csv-stringify
 * was measured at about 6 µs per row, the largest cost of a million-row export; this is the same
 * quoting at a fraction of it (docs/adr/0030-usage-report-windows-and-export.md).
 */
const NEEDS_QUOTES = /[",\r\n]/;
// A cell starting with one of these is run as a formula by spreadsheets; model ids come from
// hosters, so such text is defused with a leading apostrophe (the OWASP "CSV injection" advice).
const FORMULA_START = /^[=+\-@\t\r]/;

/** One field of text that may come from outside (a model id): quoted and defused as needed. */
export function csvText(value: string): string {
  const safe = FORMULA_START.test(value) ? `'${value}` : value;
  return NEEDS_QUOTES.test(safe) ? `"${safe.replaceAll('"', '""')}"` : safe;
}

/** One record; numbers, booleans and our own timestamps need no quoting and are passed as they are. */
export function csvLine(fields: readonly string[]): string {
  return `${fields.join(",")}\n`;
}
