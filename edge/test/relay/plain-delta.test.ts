import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { decodeTokens } from "@mkt/runtime/tokens";
import { ChunkAccumulator } from "../../src/relay/chunk-accumulator.ts";
import { plainDelta, PlainDeltas } from "../../src/relay/plain-delta.ts";

// The relay reads plain text deltas without JSON.parse (plain-delta.ts). Whatever it reads so
// must come out exactly as JSON.parse would have it, and every chunk, plain or not, must leave a
// ChunkAccumulator as the JSON.parse path leaves it: what is relayed is what is billed.

/** A chunk as written: members with their keys' raw text, so tests can spell keys and values at will. */
type Value = string | { obj: Array<[string, Value]> } | { arr: Value[] };
const obj = (members: Record<string, Value>): Value => ({
  obj: Object.entries(members).map(([key, value]) => [JSON.stringify(key), value]),
});

function render(value: Value, space = ""): string {
  if (typeof value === "string") return value;
  if ("arr" in value) return `[${value.arr.map((v) => render(v, space)).join(`,${space}`)}]`;
  return `{${value.obj.map(([k, v]) => `${k}:${space}${render(v, space)}`).join(`,${space}`)}}`;
}

const str = (s: string) => JSON.stringify(s);

/** Chunks of a plain text delta as each server writes them, content given as its literal. */
const SERVERS = {
  vllm: (content: string, index = 0, role = false) =>
    obj({
      id: str("chatcmpl-7f3a9c"),
      object: str("chat.completion.chunk"),
      created: "1764000000",
      model: str("Qwen/Qwen2.5-7B-Instruct"),
      choices: {
        arr: [
          obj({
            index: String(index),
            delta: obj(role ? { role: str("assistant"), content } : { content }),
            logprobs: "null",
            finish_reason: "null",
          }),
        ],
      },
    }),
  llamacpp: (content: string, index = 0, role = false) =>
    obj({
      choices: {
        arr: [
          obj({
            finish_reason: "null",
            index: String(index),
            delta: obj(role ? { role: str("assistant"), content } : { content }),
          }),
        ],
      },
      created: "1764000001",
      id: str("chatcmpl-Zq1"),
      model: str("gpt-3.5-turbo"),
      system_fingerprint: str("b4589-5c0b8f3c"),
      object: str("chat.completion.chunk"),
    }),
  openai: (content: string, index = 0, role = false) =>
    obj({
      id: str("chatcmpl-AbC123"),
      object: str("chat.completion.chunk"),
      created: "1764000002",
      model: str("gpt-4o-mini-2024-07-18"),
      system_fingerprint: str("fp_44709d6fcb"),
      choices: {
        arr: [
          obj({
            index: String(index),
            delta: obj(role ? { role: str("assistant"), content } : { content }),
            logprobs: "null",
            finish_reason: "null",
          }),
        ],
      },
    }),
  ollama: (content: string, index = 0) =>
    obj({
      id: str("chatcmpl-412"),
      object: str("chat.completion.chunk"),
      created: "1764000003",
      model: str("llama3.2"),
      system_fingerprint: str("fp_ollama"),
      choices: {
        arr: [obj({ index: String(index), delta: obj({ role: str("assistant"), content }), finish_reason: "null" })],
      },
    }),
  // hoster-server's demo (demo-routes.ts)
  demo: (content: string, index = 0, role = false) =>
    obj({
      id: str("chatcmpl-dEm0dEm0dEm0"),
      object: str("chat.completion.chunk"),
      created: "1764000004",
      model: str("demo-small"),
      choices: {
        arr: [
          obj({
            index: String(index),
            delta: obj(role ? { role: str("assistant"), content } : { content }),
            logprobs: "null",
            finish_reason: "null",
          }),
        ],
      },
    }),
};
type Server = keyof typeof SERVERS;
const SERVER_NAMES = Object.keys(SERVERS) as Server[];

/** Contents that test the string reading: quotes, backslashes, escapes, every kind of character. */
const CONTENTS = [
  "Hello",
  " world",
  "",
  " ",
  '"',
  "\\",
  '\\"',
  '"\\',
  "/",
  "\n",
  "\r\n",
  "\t",
  "\b\f",
  "\u0000",
  "\u001f",
  "\u007f",
  "é",
  " über",
  "日本語",
  "😀",
  "👩‍👩‍👧",
  "\ud83d", // lone surrogates: JSON.stringify writes them escaped, JSON.parse reads them back
  "\ude00",
  "\u2028\u2029",
  "\ufeff",
  "</s>",
  '{"a":1}',
  "\\u0041",
  "null",
  "}]}",
  '","finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}',
  " one two three four five six seven eight nine ten eleven twelve",
];

const hex4 = (code: number, upper: boolean) => {
  const h = code.toString(16).padStart(4, "0");
  return upper ? h.toUpperCase() : h;
};

/** A seeded generator (mulberry32): the same corpus on every run. */
function random(seed: number) {
  let a = seed;
  const next = () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(items: readonly T[]): T => items[int(items.length)]!;
  return { next, int, pick, chance: (p: number) => next() < p };
}
type Random = ReturnType<typeof random>;

/** `s` as a JSON string literal, spelt in one of the ways JSON allows (all decode to `s`). */
function literal(s: string, r: Random): string {
  const style = r.int(4);
  if (style === 0) return JSON.stringify(s);
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const ch = s[i]!;
    const ascii = style === 1; // Python's ensure_ascii: every non-ASCII unit as \uXXXX
    if (style === 3 && r.chance(0.3)) out += `\\u${hex4(c, r.chance(0.5))}`;
    else if (ch === '"') out += r.chance(0.5) ? '\\"' : "\\u0022";
    else if (ch === "\\") out += r.chance(0.5) ? "\\\\" : "\\u005C";
    else if (ch === "/" && r.chance(0.5)) out += "\\/";
    else if (c < 0x20) out += JSON.stringify(ch).slice(1, -1);
    else if (c >= 0xd800 && c <= 0xdfff) out += `\\u${hex4(c, r.chance(0.5))}`;
    else if (ascii && c > 0x7e) out += `\\u${hex4(c, r.chance(0.5))}`;
    else out += ch;
  }
  return out + '"';
}

/** A content of a few pieces. */
const content = (r: Random) => Array.from({ length: r.int(4) }, () => r.pick(CONTENTS)).join("");

/** The objects of a chunk, each with where it sits, for mutations to pick from. */
function objects(value: Value, out: Array<Array<[string, Value]>> = []) {
  if (typeof value === "string") return out;
  if ("arr" in value) value.arr.forEach((v) => objects(v, out));
  else {
    out.push(value.obj);
    value.obj.forEach(([, v]) => objects(v, out));
  }
  return out;
}

const clone = (value: Value): Value => structuredClone(value);

const ODD_VALUES = [
  "null",
  "true",
  "0",
  "-1",
  "1.5",
  "1e3",
  "01",
  '""',
  '"stop"',
  '"length"',
  "{}",
  "[]",
  '{"a":null}',
  "[null]",
  '"\\u0069d"',
  "123456789012345678",
  "9007199254740993",
  "NaN",
];
const ODD_KEYS = [
  '"id"',
  '"model"',
  '"choices"',
  '"content"',
  '"role"',
  '"index"',
  '"finish_reason"',
  '"logprobs"',
  '"usage"',
  '"error"',
  '"tool_calls"',
  '"refusal"',
  '"reasoning_content"',
  '"service_tier"',
  '"\\u0069d"',
  '"conte\\u006et"',
  '"x"',
  '"__proto__"',
  '"0"',
];

/** One change to a chunk that may or may not keep it a plain delta. */
function mutate(chunk: Value, r: Random): Value {
  const out = clone(chunk);
  const all = objects(out);
  const target = r.pick(all);
  switch (r.int(7)) {
    case 0: // another member, anywhere in it
      target.splice(r.int(target.length + 1), 0, [r.pick(ODD_KEYS), r.pick([...ODD_VALUES, str("x")])]);
      break;
    case 1: // a member repeated, with its value or another
      if (target.length > 0) {
        const [key, value] = r.pick(target);
        target.splice(r.int(target.length + 1), 0, [key, r.chance(0.5) ? clone(value) : r.pick(ODD_VALUES)]);
      }
      break;
    case 2: // a member left out
      if (target.length > 0) target.splice(r.int(target.length), 1);
      break;
    case 3: // a value changed
      if (target.length > 0) target[r.int(target.length)]![1] = r.pick(ODD_VALUES);
      break;
    case 4: {
      // the members in another order
      for (let i = target.length - 1; i > 0; i--) {
        const j = r.int(i + 1);
        [target[i], target[j]] = [target[j]!, target[i]!];
      }
      break;
    }
    case 5: {
      // a second choice, or none
      const choices = all[0]!.find(([k]) => k === '"choices"')?.[1];
      if (choices && typeof choices !== "string" && "arr" in choices) {
        if (r.chance(0.5)) choices.arr.push(clone(choices.arr[0] ?? "null"));
        else choices.arr = [];
      }
      break;
    }
    default: // a key spelt with an escape
      if (target.length > 0) {
        const member = target[r.int(target.length)]!;
        member[0] = member[0].replace(/^"(.)/, (_m, c: string) => `"\\u${hex4(c.charCodeAt(0), r.chance(0.5))}`);
      }
  }
  return out;
}

/** A character-level change to a chunk's text: an insertion, a deletion or a replacement. */
function garble(text: string, r: Random): string {
  const at = r.int(text.length + 1);
  const ch = r.pick(['"', "\\", "{", "}", "[", "]", ":", ",", " ", "\n", "0", "a", "u", "\u0001", "é"]);
  switch (r.int(3)) {
    case 0:
      return text.slice(0, at) + ch + text.slice(at);
    case 1:
      return text.slice(0, at) + text.slice(at + 1);
    default:
      return text.slice(0, at) + ch + text.slice(at + 1);
  }
}

/** Checks that plainDelta reads `text` exactly as JSON.parse does, when it reads it at all. */
function expectSameAsJsonParse(read: unknown, text: string) {
  if (read === undefined) return;
  const parsed: unknown = JSON.parse(text); // throws (fails the test) if plainDelta took invalid JSON
  expect(read).toStrictEqual(parsed);
  expect(JSON.stringify(read)).toBe(JSON.stringify(parsed)); // the keys in the same order too
}

describe("plainDelta", () => {
  const plain = (server: Server, s: string, role = false) => render(SERVERS[server](str(s), 0, role));

  it("reads the plain deltas of vLLM, llama.cpp, OpenAI, Ollama and the demo hoster as JSON.parse does", () => {
    const r = random(1);
    for (const server of SERVER_NAMES) {
      for (const s of CONTENTS) {
        for (const role of [false, true]) {
          for (let spelling = 0; spelling < 4; spelling++) {
            const text = render(SERVERS[server](literal(s, r), r.int(3), role));
            const read = plainDelta(text);
            expect(read, text).toBeDefined();
            expectSameAsJsonParse(read, text);
          }
        }
      }
    }
  });

  it("refuses every other shape", () => {
    const base = plain("vllm", "hi");
    const near = [
      base.replace(`{"content":"hi"}`, `{"role":"assistant"}`), // role only
      base.replace(`"content":"hi"`, `"content":null`),
      base.replace(`"content":"hi"`, `"content":"hi","tool_calls":[]`),
      base.replace(`"content":"hi"`, `"content":"hi","reasoning_content":"x"`),
      base.replace(`"content":"hi"`, `"content":"hi","content":"ho"`),
      plain("vllm", "hi", true).replace(`"assistant"`, `"user"`),
      base.replace(`"finish_reason":null`, `"finish_reason":"stop"`),
      base.replace(`"finish_reason":null`, `"finish_reason":"length"`),
      base.replace(`,"finish_reason":null`, ""),
      base.replace(`"index":0,`, ""),
      base.replace(`"index":0`, `"index":-1`),
      base.replace(`"index":0`, `"index":0.0`),
      base.replace(`"index":0`, `"index":"0"`),
      base.replace(`"logprobs":null`, `"logprobs":{"content":[]}`),
      base.replace(`"created":1764000000`, `"created":1764000000.5`),
      base.replace(`"created":1764000000`, `"created":01764000000`),
      base.replace(`"created":1764000000`, `"created":"1764000000"`),
      base.replace(`"created":1764000000`, `"created":null`),
      base.replace(`"object":"chat.completion.chunk"`, `"object":"chat.completion"`),
      base.replace(`"id":"chatcmpl-7f3a9c"`, `"id":7`),
      base.replace(`"id":"chatcmpl-7f3a9c"`, `"id":null`),
      base.replace(`"id"`, `"\\u0069d"`),
      base.replace(`{"id"`, `{"id":"x","id"`),
      base.replace(`]}`, `],"usage":null}`),
      base.replace(`]}`, `],"usage":{"prompt_tokens":1,"completion_tokens":2}}`),
      base.replace(`]}`, `],"error":{"message":"x"}}`),
      base.replace(`]}`, `],"service_tier":"default"}`),
      base.replace(`]}`, `],"choices":[]}`),
      base.replace(`[{`, `[{"index":1,"delta":{"content":"x"},"finish_reason":null},{`),
      base.replace(`[{`, `[[{`).replace(`}]`, `}]]`),
      base.replace(`"choices":[`, `"choices":[]`).replace(/\]\}$/, "}"),
      base.replace(`"delta":{"content":"hi"}`, `"delta":{}`),
      base.replace(`"delta":{"content":"hi"}`, `"delta":{"content":{"text":"hi"}}`),
      base.replace(`"delta":{"content":"hi"}`, `"message":{"content":"hi"}`),
      base.replace(`"content":"hi"`, `"content":"h\ni"`), // a raw control character
      base.replace(`"content":"hi"`, `"content":"h\\xi"`), // no such escape
      base.replace(`"content":"hi"`, `"content":"h\\u00e"`),
      base.replace(`"content":"hi"`, `"content":"h\\u00eg"`),
      base.replace(`"content":"hi"`, `"content":"hi\\"`),
      base + " ",
      base + "\n",
      " " + base,
      base + "}",
      base + base,
      base.replace(`,"model"`, `, "model"`),
      base.replace(`"model":`, `"model" :`),
      base.replace(`"model":`, `"model": `),
      base.slice(0, -1),
      render(SERVERS.vllm(str("hi")), " "),
      "",
      "[DONE]",
      "null",
      '"x"',
      "{}",
      '{"choices":[]}',
    ];
    for (const text of near) expect(plainDelta(text), text).toBeUndefined();
  });

  it("reads nothing JSON.parse would read otherwise: generated near misses and garbled texts", () => {
    const r = random(2);
    let read = 0;
    for (let i = 0; i < 30_000; i++) {
      const server = r.pick(SERVER_NAMES);
      let chunk = SERVERS[server](literal(content(r), r), r.int(2), r.chance(0.3));
      for (let m = r.int(3); m > 0; m--) chunk = mutate(chunk, r);
      let text = render(chunk, r.chance(0.05) ? r.pick([" ", "\n", "\t"]) : "");
      for (let g = r.chance(0.4) ? 1 + r.int(2) : 0; g > 0; g--) text = garble(text, r);
      const result = plainDelta(text);
      if (result !== undefined) read++;
      expectSameAsJsonParse(result, text);
    }
    // Both kinds were seen.
    expect(read).toBeGreaterThan(3_000);
    expect(read).toBeLessThan(27_000);
  });
});

describe("PlainDeltas (one stream's chunks)", () => {
  it("reads a chunk that repeats the last one's text around its content as JSON.parse does", () => {
    const r = random(3);
    for (const server of SERVER_NAMES) {
      const deltas = new PlainDeltas();
      for (let i = 0; i < 500; i++) {
        let text = render(SERVERS[server](literal(content(r), r), 0, i === 0));
        // Now and then not a plain delta, or one with another head, or a garbled repeat.
        const roll = r.next();
        if (roll < 0.1) text = render(mutate(SERVERS[server](literal(content(r), r)), r));
        else if (roll < 0.15) text = text.replace("1764", "1765");
        else if (roll < 0.25) text = garble(text, r);
        const read = deltas.read(text);
        expectSameAsJsonParse(read, text);
        // The caller may change what it is given; the next chunk must not see it.
        if (read) {
          const choice = (read.choices as Array<{ delta: Record<string, unknown>; finish_reason: unknown }>)[0]!;
          choice.delta.content = "changed";
          choice.finish_reason = "length";
          read.id = "ours";
        }
      }
    }
  });

  it("takes the repeats without a scan, and scans again soon after a stream of other chunks", () => {
    const deltas = new PlainDeltas();
    const parse = vi.spyOn(JSON, "parse");
    try {
      for (let i = 0; i < 100; i++) expect(deltas.read(render(SERVERS.demo(str(`w${i}`), 0, i === 0)))).toBeDefined();
      expect(parse).not.toHaveBeenCalled();
      // Fifty tool-call chunks: some are scanned, and refused.
      const tool = render(SERVERS.demo(str("x"))).replace(`"content":"x"`, `"tool_calls":[]`);
      for (let i = 0; i < 50; i++) expect(deltas.read(tool)).toBeUndefined();
      // A plain delta with the same head as before reads at once; one with another within 32 chunks.
      expect(deltas.read(render(SERVERS.demo(str("again"))))).toBeDefined();
      const other = (s: string) => render(SERVERS.vllm(str(s)));
      for (let i = 0; i < 50; i++) deltas.read(tool);
      const misses = Array.from({ length: 40 }, (_, i) => deltas.read(other(`v${i}`))).findIndex((x) => x);
      expect(misses).toBeGreaterThanOrEqual(0);
      expect(misses).toBeLessThanOrEqual(32);
    } finally {
      parse.mockRestore();
    }
  });
});

describe("ChunkAccumulator reads plain deltas as the JSON.parse path does", () => {
  beforeAll(() => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(new Date("2026-11-28T12:00:00Z"));
  });
  afterAll(() => vi.useRealTimers());

  const usage = { inputTokens: 12n, outputTokens: 7n, cachedInputTokens: 0n, reasoningTokens: 0n };

  /**
   * gpt-tokenizer 4.0.0 decodes through one TextDecoder in streaming mode that it never flushes:
   * the bytes of a character a cut token list ends inside are prepended to whatever the next
   * decodeTokens call decodes, in any stream. So where OutputBudget cuts a piece depends on the
   * cut before it, and the two accumulators compared here would cut differently for that reason
   * alone. Four continuation bytes (token 222 is byte 0x80) complete or reject whatever is pending.
   */
  const flushDecoder = () => decodeTokens([222, 222, 222, 222]);

  /** Feeds `texts` to one accumulator with the fast path and one without; checks every result is the same. */
  function compare(texts: string[], limit: number, streamed: boolean) {
    const fast = new ChunkAccumulator("chatcmpl-req-1", "our-model", limit);
    const slow = new ChunkAccumulator("chatcmpl-req-1", "our-model", limit, { scanPlainDeltas: false });
    // The same reader as the fast one's, to count the chunks it reads.
    const mirror = new PlainDeltas();
    let read = 0;
    const feed = (acc: ChunkAccumulator, text: string) => {
      try {
        const out = streamed ? acc.relayText(text) : acc.accept(text);
        return { out: typeof out === "string" ? out : JSON.stringify(out), value: out };
      } catch (err) {
        return { error: `${(err as Error).constructor.name}: ${(err as Error).message}` };
      }
    };
    for (const text of texts) {
      if (mirror.read(text)) read++;
      flushDecoder();
      const a = feed(fast, text);
      flushDecoder();
      const b = feed(slow, text);
      expect(a, text).toStrictEqual(b);
      expect(fast.stoppedByGuard).toBe(slow.stoppedByGuard);
      expect(fast.finished).toBe(slow.finished);
      expect(JSON.stringify(fast.completion(usage, 1n)), text).toBe(JSON.stringify(slow.completion(usage, 1n)));
    }
    const observed = (acc: ChunkAccumulator) => ({
      completion: JSON.stringify(acc.completion(usage, 123n)),
      usageChunk: JSON.stringify(acc.usageChunk(usage, 123n)),
      delivered: acc.deliveredTokens(),
      finishReason: acc.finishReason,
      finished: acc.finished,
      cut: acc.cutByGuard,
      stopped: acc.stoppedByGuard,
      reported: acc.reportedUsage,
      created: acc.created,
      firstChoiceAt: acc.firstChoiceAt,
    });
    expect(observed(fast)).toStrictEqual(observed(slow));
    return { read, of: texts.length };
  }

  it("on hand-written streams of each server, with the guard cutting them or not", () => {
    for (const server of SERVER_NAMES) {
      const make = SERVERS[server];
      const texts = [
        render(make(str(""), 0, true)),
        ...CONTENTS.map((s) => render(make(str(s)))),
        render(make(str("tail"))).replace(`"finish_reason":null`, `"finish_reason":"stop"`),
        `{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":40}}`,
      ];
      for (const limit of [0, 1, 3, 10, 25, 100_000]) {
        for (const streamed of [true, false]) {
          const { read, of } = compare(texts, limit, streamed);
          expect(read).toBeGreaterThanOrEqual(of - 3); // all but the finishing, usage and maybe role chunks
        }
      }
    }
  });

  it("on generated streams: plain deltas, near misses, garbled chunks, two choices, cuts", () => {
    const r = random(4);
    let read = 0;
    let of = 0;
    for (let stream = 0; stream < 1_500; stream++) {
      const server = r.pick(SERVER_NAMES);
      const make = SERVERS[server];
      const choices = r.chance(0.2) ? 2 : 1;
      const texts: string[] = [];
      for (let c = 0; c < choices; c++) texts.push(render(make(literal("", r), c, true)));
      const length = 1 + r.int(30);
      for (let i = 0; i < length; i++) {
        let chunk = make(literal(content(r), r), r.int(choices));
        if (r.chance(0.1)) chunk = mutate(chunk, r);
        let text = render(chunk);
        if (r.chance(0.02)) text = garble(text, r);
        if (r.chance(0.05)) text = text.replace(/"created":\d+/, `"created":${1764000000 + i}`);
        texts.push(text);
      }
      if (r.chance(0.8)) {
        for (let c = 0; c < choices; c++) {
          texts.push(
            render(make(literal(content(r), r), c)).replace(
              `"finish_reason":null`,
              `"finish_reason":${str(r.pick(["stop", "length"]))}`,
            ),
          );
        }
      }
      if (r.chance(0.5)) {
        texts.push(`{"id":"x","choices":[],"usage":{"prompt_tokens":${r.int(50)},"completion_tokens":${r.int(50)}}}`);
      }
      const limit = r.pick([0, 2, 5, 12, 40, 100_000]);
      const counts = compare(texts, limit, r.chance(0.7));
      read += counts.read;
      of += counts.of;
    }
    // Most chunks went the fast way, and many did not.
    expect(read / of).toBeGreaterThan(0.5);
    expect(read / of).toBeLessThan(0.9);
  });
});
