import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { countPromptTokens, type ChatMessageLike } from "@mkt/runtime/tokens";
import { PromptTokenCounter } from "../src/chat/prompt-tokens.ts";

const counter = new PromptTokenCounter(2);
afterAll(() => counter.close());

const bodyOf = (messages: ChatMessageLike[]) => Buffer.from(JSON.stringify({ model: "auto", messages }));

describe("prompt token counting", () => {
  it("counts in a worker what the shared counter counts, for small and large prompts", async () => {
    const small: ChatMessageLike[] = [
      { role: "system", content: "You are terse." },
      { role: "user", name: "ada", content: [{ type: "text", text: "Sum 2 and 2." }] },
    ];
    const large: ChatMessageLike[] = [
      { role: "user", content: "Tokenize this sentence, again and again. ".repeat(50_000) },
    ];
    for (const messages of [small, large]) {
      expect(await counter.count(bodyOf(messages))).toBe(countPromptTokens(messages));
    }
  });

  it("keeps the tokenizer out of the edge's main thread", async () => {
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
