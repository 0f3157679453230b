const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const OPEN_OBJECT = 0x7b;
const OPEN_ARRAY = 0x5b;
const CLOSE_OBJECT = 0x7d;
const CLOSE_ARRAY = 0x5d;

const isSpace = (c: number) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;

function skipSpace(text: string, i: number): number {
  while (i < text.length && isSpace(text.charCodeAt(i))) i++;
  return i;
}

/** Index of the quote closing the JSON string that opens at `start`, or -1. */
function stringEnd(text: string, start: number): number {
  for (let from = start + 1; ;) {
    const quote = text.indexOf('"', from);
    if (quote === -1) return -1;
    let slashes = 0;
    while (text.charCodeAt(quote - 1 - slashes) === BACKSLASH) slashes++;
    if (slashes % 2 === 0) return quote;
    from = quote + 1;
  }
}

function hasBackslash(text: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (text.charCodeAt(i) === BACKSLASH) return true;
  return false;
}

/**
 * Sets string members at the top level of JSON objects (a chunk's `id` and `model`) by editing
 * their text, leaving every other byte as it was: how the relay puts its own values into an
 * upstream's chunks without serializing each chunk again. One per answer: the values are encoded
 * once, and the head of the chunks (every member up to the last one set), which an upstream
 * writes the same in every chunk of a stream, is edited once and reused while it repeats.
 *
 * The caller has parsed the text and passes what JSON.parse read for each key. The scan stops at
 * the first occurrence of every key; JSON.parse keeps the last, so the two must agree, or the text
 * repeats a key with another value (or spells it with escapes) and the caller serializes. A
 * repeat with the very same value is not looked for: finding it takes a scan of each chunk's whole
 * text, several times the edit's cost, and the worst it does is show a client the upstream's own
 * id or model name in a chunk, a misbehaving upstream's doing with no effect on billing.
 *
 * A general JSON tokenizer (jsonc-parser) would visit every token and cost what it saves; this
 * scan skips strings with indexOf and looks only at top-level keys.
 */
export class TopLevelStrings {
  readonly #keys: string[];
  readonly #encoded: string[];
  /** The last edited head: as the upstream wrote it, the values it held, and as edited. */
  #head: { upstream: string; values: unknown[]; ours: string } | undefined;

  constructor(values: Readonly<Record<string, string>>) {
    this.#keys = Object.keys(values);
    this.#encoded = this.#keys.map((key) => JSON.stringify(values[key]));
  }

  /**
   * `text` with the top-level members named by the keys set to their values, or undefined when
   * that cannot be done exactly by an edit (a member missing, not a string, spelt with escapes, or
   * repeated with another value): the caller then serializes. `parsed` holds what JSON.parse read
   * for each key, in the constructor's order.
   */
  apply(text: string, parsed: readonly unknown[]): string | undefined {
    const head = this.#head;
    if (head && text.slice(0, head.upstream.length) === head.upstream && sameValues(head.values, parsed)) {
      return head.ours + text.slice(head.upstream.length);
    }
    return this.#scan(text, parsed);
  }

  #scan(text: string, parsed: readonly unknown[]): string | undefined {
    const all = (1 << this.#keys.length) - 1;
    const values: unknown[] = [];
    let found = 0;
    let edited = "";
    let copiedTo = 0;
    let depth = 0;
    let i = skipSpace(text, 0);
    if (text.charCodeAt(i) !== OPEN_OBJECT) return undefined;
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c !== QUOTE) {
        if (c === OPEN_OBJECT || c === OPEN_ARRAY) depth++;
        else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) depth--;
        i++;
        continue;
      }
      const end = stringEnd(text, i);
      if (end === -1) return undefined;
      if (depth !== 1) {
        i = end + 1;
        continue;
      }
      // At the top level every string met here is a key: a string value is taken with its key.
      if (hasBackslash(text, i + 1, end)) return undefined;
      const which = this.#keyAt(text, i + 1, end);
      i = skipSpace(text, end + 1);
      if (text.charCodeAt(i) !== COLON) return undefined;
      i = skipSpace(text, i + 1);
      const isString = text.charCodeAt(i) === QUOTE;
      if (!isString) {
        if (which !== -1) return undefined;
        continue;
      }
      const valueEnd = stringEnd(text, i);
      if (valueEnd === -1) return undefined;
      if (which === -1) {
        i = valueEnd + 1;
        continue;
      }
      const raw = text.slice(i, valueEnd + 1);
      values[which] = JSON.parse(raw);
      if (values[which] !== parsed[which]) return undefined;
      if (raw !== this.#encoded[which]) {
        edited += text.slice(copiedTo, i) + this.#encoded[which]!;
        copiedTo = valueEnd + 1;
      }
      found |= 1 << which;
      i = valueEnd + 1;
      if (found === all) {
        const head = { upstream: text.slice(0, i), values, ours: edited + text.slice(copiedTo, i) };
        this.#head = head;
        return head.ours + text.slice(i);
      }
    }
    return undefined;
  }

  /** Which key the key text between `from` and `to` is, or -1. */
  #keyAt(text: string, from: number, to: number): number {
    const length = to - from;
    for (let k = 0; k < this.#keys.length; k++) {
      const key = this.#keys[k]!;
      if (key.length === length && text.startsWith(key, from)) return k;
    }
    return -1;
  }
}

function sameValues(a: readonly unknown[], b: readonly unknown[]): boolean {
  for (let k = 0; k < a.length; k++) if (a[k] !== b[k]) return false;
  return true;
}
