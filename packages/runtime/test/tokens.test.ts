import { randomBytes } from "node:crypto";
import { countTokens, decode } from "gpt-tokenizer";
import { describe, expect, it } from "vitest";
import {
  LONGEST_TOKEN_BYTES,
  maximumPromptTokens,
  minimumPromptTokens,
  TOKENS_PER_MESSAGE,
  type ChatMessageLike,
} from "../src/token-bounds.ts";
import { countPromptTokens, countTextTokens, decodeTokens, encodeText, tokenizerPieces } from "../src/tokens.ts";

const plain = { disallowedSpecial: new Set<string>() };
const prose = "The quick brown fox jumps over the lazy dog, twice.\n\nThen it rests.  ".repeat(4_000);
const base64Run = randomBytes(60_000).toString("base64").replace(/[+/=]/g, "Q");

describe("token counting", () => {
  it("knows the longest token of the vocabulary", () => {
    let longest = 0;
    for (let id = 0; id < 200_000; id++) {
      let text: string;
      try {
        text = decode([id]);
      } catch {
        continue; // ids the vocabulary does not use
      }
      // A token cut inside a character decodes to U+FFFD (3 bytes), never fewer bytes than it has.
      longest = Math.max(longest, Buffer.byteLength(text, "utf8"));
    }
    expect(longest).toBe(LONGEST_TOKEN_BYTES);
  });

  it("counts prose in pieces exactly as the tokenizer counts it whole", () => {
    expect(prose.length).toBeGreaterThan(200_000);
    expect(countTextTokens(prose)).toBe(countTokens(prose, plain));
  });

  it("cuts runs without breaks into bounded pieces that join back to the text", () => {
    const text = `intro ${base64Run} ${" ".repeat(3_000)}tail 😀${"😀".repeat(600)}`;
    const pieces = [...tokenizerPieces(text)];
    expect(pieces.join("")).toBe(text);
    for (const piece of pieces) {
      expect(piece.length).toBeLessThanOrEqual(65_536 + 512);
      expect(piece).not.toMatch(/\S{513}|\s{513}/u);
      // Never a lone half of a surrogate pair at a cut.
      expect(piece).not.toMatch(/^[\uDC00-\uDFFF]|[\uD800-\uDBFF]$/);
    }
    // A run costs at most one token per cut more than counting it whole would.
    const whole = countTokens(base64Run.slice(0, 20_000), plain);
    const inPieces = countTextTokens(base64Run.slice(0, 20_000));
    expect(inPieces).toBeGreaterThanOrEqual(whole);
    expect(inPieces).toBeLessThanOrEqual(whole + Math.ceil(20_000 / 512));
  });

  it("decodes token ids with nothing left pending: a cut inside a character never leaks into the next decode", () => {
    const family = '👩‍👩‍👧 and \\"quoted\\" ü';
    const tokens = encodeText(family);
    expect(decodeTokens(tokens)).toBe(family);
    for (let n = 0; n <= tokens.length; n++) {
      const cut = decodeTokens(tokens.slice(0, n));
      expect(family.startsWith(cut.replace(/\uFFFD+$/, ""))).toBe(true);
      // gpt-tokenizer alone would start this one with the cut's pending bytes (U+FFFD).
      expect(decodeTokens(tokens)).toBe(family);
    }
  });

  it("stops counting once past the limit", () => {
    const full = countTextTokens(prose);
    const stopped = countTextTokens(prose, 1_000);
    expect(stopped).toBeGreaterThan(1_000);
    expect(stopped).toBeLessThan(full);
    const messages: ChatMessageLike[] = [
      { role: "system", content: "short" },
      { role: "user", content: prose },
      { role: "user", content: prose },
    ];
    const prompt = countPromptTokens(messages, { limit: 5_000 });
    expect(prompt).toBeGreaterThan(5_000);
    expect(prompt).toBeLessThan(countPromptTokens(messages));
  });

  it("bounds a prompt from below without tokenizing, never above its real count", () => {
    const cases: ChatMessageLike[][] = [
      [{ role: "user", content: " ".repeat(128 * 50) }], // the longest token, 50 times: the tight case
      [{ role: "user", content: prose }],
      [{ role: "user", name: "ada", content: [{ type: "text", text: base64Run }, { type: "image_url" }] }],
      [
        { role: "user", content: "é".repeat(10_000) },
        { role: "assistant", content: null },
      ],
    ];
    for (const messages of cases) {
      expect(minimumPromptTokens(messages)).toBeLessThanOrEqual(countPromptTokens(messages));
    }
    expect(minimumPromptTokens([{ role: "user", content: "QUJD".repeat(3_500_000) }])).toBeGreaterThan(100_000);
  });

  it("bounds a prompt from above by its UTF-8 bytes, never below its real count", () => {
    const tools = [{ type: "function", function: { name: "f", description: "é😀", parameters: { type: "object" } } }];
    const cases: Array<[ChatMessageLike[], unknown]> = [
      [[{ role: "user", content: "" }], undefined],
      [[{ role: "user", content: "Tell me something about benchmarks." }], undefined],
      [[{ role: "user", content: prose }], tools],
      [[{ role: "user", name: "ada", content: [{ type: "text", text: base64Run }, { type: "image_url" }] }], undefined],
      [[{ role: "user", content: "😀é中".repeat(5_000) }], undefined],
      [[{ role: "user", content: randomBytes(20_000).toString("latin1") }], undefined],
      [
        [
          { role: "system", content: "x" },
          { role: "assistant", content: null },
          { role: "user", content: " " },
        ],
        tools,
      ],
    ];
    for (const [messages, withTools] of cases) {
      const counted = countPromptTokens(messages, { tools: withTools });
      expect(maximumPromptTokens(messages, withTools)).toBeGreaterThanOrEqual(counted);
    }
    // Tight enough to be worth holding on for a short prompt: a few bytes per token of English.
    const short: ChatMessageLike[] = [{ role: "user", content: "Tell me something about benchmarks." }];
    expect(maximumPromptTokens(short)).toBeLessThan(6 * countPromptTokens(short));
  });

  it("counts the names and arguments of an assistant's tool calls as prompt", () => {
    const args = '{"city":"Paris","unit":"celsius"}';
    const withCall: ChatMessageLike = {
      role: "assistant",
      content: null,
      tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: args } }],
    };
    const without: ChatMessageLike = { role: "assistant", content: null };
    expect(countPromptTokens([withCall]) - countPromptTokens([without])).toBe(
      countTextTokens("get_weather") + countTextTokens(args),
    );
    expect(minimumPromptTokens([withCall])).toBeLessThanOrEqual(countPromptTokens([withCall]));
  });

  it("counts tool definitions as prompt: name, description and parameter schema", () => {
    const parameters = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };
    const tools = [{ type: "function", function: { name: "get_weather", description: "Weather now.", parameters } }];
    const messages: ChatMessageLike[] = [{ role: "user", content: "Weather in Paris?" }];
    expect(countPromptTokens(messages, { tools }) - countPromptTokens(messages)).toBe(
      TOKENS_PER_MESSAGE +
        countTextTokens("get_weather") +
        countTextTokens("Weather now.") +
        countTextTokens(JSON.stringify(parameters)),
    );
    expect(minimumPromptTokens(messages, tools)).toBeLessThanOrEqual(countPromptTokens(messages, { tools }));
    // Anything else in `tools` (not a function definition) adds nothing to count.
    expect(countPromptTokens(messages, { tools: "nonsense" })).toBe(countPromptTokens(messages));
  });
});
