import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { countPromptTokens, type ChatMessageLike } from "@mkt/runtime/tokens";
import { PromptTokenCounter } from "../src/chat/prompt-tokens.ts";

const workersOnly = new PromptTokenCounter(2, 0);
const inlineSmall = new PromptTokenCounter(1, 1024);
afterAll(() => Promise.all([workersOnly.close(), inlineSmall.close()]));

const bodyOf = (messages: ChatMessageLike[]) => Buffer.from(JSON.stringify({ model: "auto", messages }));

const small: ChatMessageLike[] = [
  { role: "system", content: "You are terse." },
  { role: "user", name: "ada", content: [{ type: "text", text: "Sum 2 and 2." }] },
];
const large: ChatMessageLike[] = [
  { role: "user", content: "Tokenize this sentence, again and again. ".repeat(50_000) },
];

describe("prompt token counting", () => {
  it("counts in a worker what the shared counter counts, for small and large prompts", async () => {
    for (const messages of [small, large]) {
      expect(await workersOnly.count(bodyOf(messages), messages)).toBe(countPromptTokens(messages));
    }
  });

  it("counts small prompts on the main thread and larger ones in a worker, the same way", async () => {
    expect(bodyOf(small).length).toBeLessThanOrEqual(1024);
    expect(await inlineSmall.count(bodyOf(small), small)).toBe(countPromptTokens(small));
    expect(inlineSmall.workerThreads).toBe(0);
    // The body decides where: a large one is counted from its bytes, in a worker.
    expect(await inlineSmall.count(bodyOf(large), large)).toBe(countPromptTokens(large));
    expect(inlineSmall.workerThreads).toBe(1);
  });

  it("does not load the tokenizer when the edge starts", async () => {
    // A fresh process imports the edge's whole module graph and lists what it loaded.
    const script = `
      import { registerHooks } from "node:module";
      const loaded = [];
      registerHooks({ load: (url, context, next) => (loaded.push(url), next(url, context)) });
      await import(${JSON.stringify(new URL("../src/server.ts", import.meta.url).href)});
      process.stdout.write(JSON.stringify(loaded.filter((url) => url.includes("gpt-tokenizer"))));
    `;
    const { stdout } = await promisify(execFile)(process.execPath, ["--input-type=module", "-e", script]);
    expect(JSON.parse(stdout)).toEqual([]);
  });
});
