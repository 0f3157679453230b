import { randomBytes } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { countPromptTokens, type ChatMessageLike } from "@mkt/runtime/tokens";
import { PromptTokenCounter, type PromptTokenSettings } from "../src/chat/prompt-tokens.ts";

const counters: PromptTokenCounter[] = [];
const counter = (settings: Partial<PromptTokenSettings>) => {
  const made = new PromptTokenCounter({
    threads: 1,
    inlineMaxBytes: 1024,
    deadlineMs: 10_000,
    accountQueue: 8,
    ...settings,
  });
  counters.push(made);
  return made;
};
afterAll(() => Promise.all(counters.map((c) => c.close())));

const bodyOf = (messages: readonly ChatMessageLike[]) => Buffer.from(JSON.stringify({ model: "auto", messages }));
const prompt = (messages: readonly ChatMessageLike[], limit = 1_000_000, accountId = "acct") => ({
  accountId,
  body: bodyOf(messages),
  messages,
  limit,
});

const small: ChatMessageLike[] = [
  { role: "system", content: "You are terse." },
  { role: "user", name: "ada", content: [{ type: "text", text: "Sum 2 and 2." }] },
];
const large: ChatMessageLike[] = [
  { role: "user", content: "Tokenize this sentence, again and again. ".repeat(50_000) },
];

describe("prompt token counting", () => {
  it("counts in a worker what the shared counter counts, for small and large prompts", async () => {
    const workersOnly = counter({ threads: 2, inlineMaxBytes: 0 });
    for (const messages of [small, large]) {
      expect(await workersOnly.count(prompt(messages))).toBe(countPromptTokens(messages));
    }
  });

  it("counts small prompts on the main thread and larger ones in a worker, the same way", async () => {
    const inlineSmall = counter({});
    expect(bodyOf(small).length).toBeLessThanOrEqual(1024);
    expect(await inlineSmall.count(prompt(small))).toBe(countPromptTokens(small));
    expect(inlineSmall.workerThreads).toBe(0);
    // The body decides where: a large one is counted from its bytes, in a worker.
    expect(await inlineSmall.count(prompt(large))).toBe(countPromptTokens(large));
    expect(inlineSmall.workerThreads).toBe(1);
  });

  it("refuses by length alone a prompt that cannot fit, without starting a worker", async () => {
    const fresh = counter({});
    const huge: ChatMessageLike[] = [{ role: "user", content: "QUJD".repeat(3_500_000) }]; // 14 MB, one run
    expect(await fresh.count(prompt(huge, 8_192))).toBeGreaterThan(8_192);
    expect(fresh.workerThreads).toBe(0);
  });

  it("stops counting a prompt past the context it could be served with", async () => {
    const limit = 20_000;
    expect(await counter({}).count(prompt(large, limit))).toBeGreaterThan(limit);
    expect(await counter({ inlineMaxBytes: 100_000_000 }).count(prompt(large, limit))).toBeGreaterThan(limit);
  });

  it("answers 503 when a prompt is not counted by its deadline, and stops its worker", async () => {
    // Long enough for a fresh worker to load the tokenizer on a busy machine (the second count).
    const slow = counter({ deadlineMs: 2_000 });
    // Random base64 without breaks: ~2 µs a byte, so 6 MB would take over ten seconds with no limit.
    const run: ChatMessageLike[] = [{ role: "user", content: randomBytes(4_500_000).toString("base64") }];
    const refused = await slow.count(prompt(run, Number.MAX_SAFE_INTEGER)).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(AppError);
    expect(refused).toMatchObject({ code: "service_unavailable", headers: { "retry-after": "1" } });
    // The pool still counts the next prompt.
    expect(await slow.count(prompt(large, 1_000_000, "other"))).toBe(countPromptTokens(large));
  });
});
