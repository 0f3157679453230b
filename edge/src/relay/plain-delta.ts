/**
 * Reads the common chat.completion.chunk without JSON.parse. Parsing every upstream chunk was
 * ~14% of the relay's CPU with 1,000 streams (bench/README.md), and nearly every chunk of a
 * stream is a plain text delta, as vLLM, llama.cpp, Ollama and hoster-server's demo write it:
 *
 *   {"id":"…","object":"chat.completion.chunk","created":1,"model":"…","system_fingerprint":"…",
 *    "choices":[{"index":0,"delta":{"role":"assistant","content":"…"},"logprobs":null,"finish_reason":null}]}
 *
 * `plainDelta` recognises exactly that shape and returns the object JSON.parse would: the same
 * values, the keys in the text's order (so a chunk serialized again reads as it would have), for
 * ChunkAccumulator to take as it takes a parsed one, with the same effects. Members may come in
 * any order; `id`, `object`, `created`, `model` and `system_fingerprint` may be left out;
 * `choices` holds exactly one choice with `index`, `delta` (`content`, a string, and `role`,
 * "assistant", optional) and `finish_reason` null (`logprobs` null optional). Anything else
 * returns undefined and the caller parses the text: whitespace between tokens, another key or a
 * repeated one, a value of another type (`created` and `index` only as plain integers), a
 * finish_reason, a second choice, text after the object. Strings are taken between their quotes
 * when they hold no escape, and through JSON.parse of the string literal alone when they do. A
 * chunk wrongly taken here could be billed wrongly; one wrongly refused only costs a JSON.parse:
 * when in doubt, it refuses.
 */

type Json = Record<string, unknown>;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const ZERO = 0x30;
const NINE = 0x39;

/** The keys an object may hold; each opens a member as `"name":` (no space). */
interface Keys {
  names: readonly string[];
  openings: readonly string[];
  /** Each name's first character, tried before the whole opening. */
  firsts: readonly number[];
}
const keys = (...names: string[]): Keys => ({
  names,
  openings: names.map((name) => `"${name}":`),
  firsts: names.map((name) => name.charCodeAt(0)),
});
const CHUNK_KEYS = keys("id", "object", "created", "model", "system_fingerprint", "choices");
const CHOICE_KEYS = keys("index", "delta", "logprobs", "finish_reason");
const DELTA_KEYS = keys("role", "content");

/**
 * Reads one stream's chunks (one per ChunkAccumulator). A plain delta is scanned whole once; the
 * text around its content's string literal is kept, and a later chunk that repeats both sides
 * exactly (an upstream writes the same id, created and model into every chunk of a stream) is
 * read by scanning that literal alone: its object is the last one's with another content.
 *
 * A whole scan that fails may cost about what JSON.parse then costs again, so after one the next
 * chunk is left to JSON.parse unscanned, after two in a row the next two, then four, up to 32: a
 * stream of another shape (tool calls, reasoning, a server that writes `"usage":null` into every
 * chunk) pays for a scan only now and then, and finds the fast path again once its text starts.
 */
export class PlainDeltas {
  /** The last plain delta scanned whole: its text before and after the content's literal, and its object. */
  #last: { before: string; after: string; chunk: Json; choice: Json; delta: Json } | undefined;
  /** Chunks still to leave unscanned, and how many the next failed scan leaves. */
  #unscanned = 0;
  #backoff = 1;

  /** The object JSON.parse would return for `chunk` when it is a plain text delta, else undefined. */
  read(chunk: string): Json | undefined {
    const repeated = this.#repeated(chunk);
    if (repeated) {
      this.#backoff = 1;
      return repeated;
    }
    if (this.#unscanned > 0) {
      this.#unscanned--;
      return undefined;
    }
    const scanned = plainDelta(chunk);
    if (scanned === undefined) {
      this.#unscanned = this.#backoff;
      this.#backoff = Math.min(this.#backoff * 2, 32);
      return undefined;
    }
    this.#backoff = 1;
    const choice = (scanned.choices as Json[])[0]!;
    this.#last = {
      before: chunk.slice(0, contentStart),
      after: chunk.slice(contentEnd),
      // Copies: the caller may change the object it is given.
      chunk: { ...scanned },
      choice: { ...choice },
      delta: { ...(choice.delta as Json) },
    };
    return scanned;
  }

  /** `chunk` when it is the last plain delta with another content. */
  #repeated(chunk: string): Json | undefined {
    const last = this.#last;
    if (!last) return undefined;
    const { before, after } = last;
    // Slices compared: startsWith and endsWith took several times as long on V8.
    if (chunk.slice(0, before.length) !== before || chunk.slice(chunk.length - after.length) !== after) {
      return undefined;
    }
    text = chunk;
    at = before.length;
    const content = string();
    const fits = at === chunk.length - after.length;
    text = "";
    if (content === undefined || !fits) return undefined;
    return { ...last.chunk, choices: [{ ...last.choice, delta: { ...last.delta, content } }] };
  }
}

// The text being read and the position in it: one chunk is read at a time, synchronously.
let text = "";
let at = 0;
/** Where the last chunk read whole had the content's string literal. */
let contentStart = 0;
let contentEnd = 0;

/** The object JSON.parse would return for `chunk` when it is a plain text delta, else undefined. */
export function plainDelta(chunk: string): Json | undefined {
  text = chunk;
  at = 0;
  const read = object(CHUNK_KEYS, chunkValue, 1 << 5); // choices
  const whole = at === chunk.length;
  text = "";
  return whole ? read : undefined;
}

/** The value of the chunk's member `key` (undefined: not the shape). */
function chunkValue(key: number): unknown {
  switch (key) {
    case 0: // id
    case 3: // model
      return string();
    case 1: // object
      return literal('"chat.completion.chunk"', "chat.completion.chunk");
    case 2: // created
      return integer();
    case 4: // system_fingerprint
      return text.charCodeAt(at) === QUOTE ? string() : literal("null", null);
    default: {
      // choices: exactly one, with index, delta and finish_reason
      if (!take(OPEN_ARRAY)) return undefined;
      const choice = object(CHOICE_KEYS, choiceValue, 0b1011);
      return choice !== undefined && take(CLOSE_ARRAY) ? [choice] : undefined;
    }
  }
}

function choiceValue(key: number): unknown {
  switch (key) {
    case 0: // index
      return integer();
    case 1: // delta: content, role optional
      return object(DELTA_KEYS, deltaValue, 0b10);
    default: // logprobs, finish_reason
      return literal("null", null);
  }
}

function deltaValue(key: number): unknown {
  if (key === 0) return literal('"assistant"', "assistant");
  contentStart = at;
  const content = string();
  contentEnd = at;
  return content;
}

/**
 * `{` members `}`: each key one of `keys` at most once and those in `required` (bits of their
 * indexes) present, each value read by `value`. The object has the members in the text's order.
 */
function object(keys: Keys, value: (key: number) => unknown, required: number): Json | undefined {
  if (!take(OPEN_OBJECT)) return undefined;
  const { names, openings, firsts } = keys;
  const into: Json = {};
  let seen = 0;
  do {
    const first = text.charCodeAt(at + 1);
    let key = 0;
    while (key < names.length && !(firsts[key] === first && text.startsWith(openings[key]!, at))) key++;
    if (key === names.length || seen & (1 << key)) return undefined;
    seen |= 1 << key;
    at += openings[key]!.length;
    const read = value(key);
    if (read === undefined) return undefined;
    into[names[key]!] = read;
  } while (take(COMMA));
  return (seen & required) === required && take(CLOSE_OBJECT) ? into : undefined;
}

function take(char: number): boolean {
  if (text.charCodeAt(at) !== char) return false;
  at++;
  return true;
}

/** `spelt` exactly, standing for `value`. */
function literal<T>(spelt: string, value: T): T | undefined {
  if (!text.startsWith(spelt, at)) return undefined;
  at += spelt.length;
  return value;
}

/** A JSON integer without sign, fraction or exponent, of at most 15 digits (exact as a number). */
function integer(): number | undefined {
  const start = at;
  let end = start;
  for (let c = text.charCodeAt(end); c >= ZERO && c <= NINE; c = text.charCodeAt(end)) end++;
  const digits = end - start;
  if (digits === 0 || digits > 15 || (digits > 1 && text.charCodeAt(start) === ZERO)) return undefined;
  at = end;
  return Number(text.slice(start, end));
}

/** A JSON string literal, decoded. */
function string(): string | undefined {
  const start = at;
  if (text.charCodeAt(start) !== QUOTE) return undefined;
  let escaped = false;
  for (let i = start + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      at = i + 1;
      if (!escaped) return text.slice(start + 1, i);
      try {
        // The literal alone: JSON.parse checks and decodes its escapes as it would in the whole text.
        return JSON.parse(text.slice(start, i + 1)) as string;
      } catch {
        return undefined;
      }
    }
    if (c < 0x20) return undefined; // a control character must be escaped
    if (c === BACKSLASH) {
      escaped = true;
      i++; // the escaped character, whatever it is: JSON.parse judges the escape
    }
  }
  return undefined;
}
