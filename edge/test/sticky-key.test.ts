import { describe, expect, it } from "vitest";
import { STICKY_PROMPT_CHARS, stickyKey } from "../src/routing/sticky-key.ts";

const LONG_SYSTEM = "You are a careful coding agent. ".repeat(Math.ceil(STICKY_PROMPT_CHARS / 32));

/** A conversation's first `turns` requests: each resends the whole conversation so far. */
function turns(first: { role: string; content: string }[], count: number) {
  const bodies = [];
  const messages = [...first];
  for (let i = 0; i < count; i++) {
    bodies.push({ messages: [...messages] });
    messages.push({ role: "assistant", content: `answer ${i}` }, { role: "user", content: `question ${i + 1}` });
  }
  return bodies;
}

describe("the sticky key of a request", () => {
  it("is the account with prompt_cache_key, whatever the prompt's length", () => {
    const short = [{ role: "user", content: "hi" }];
    const key = stickyKey("acct-1", { messages: short, prompt_cache_key: "session-1" });
    expect(key).toBeDefined();
    expect(stickyKey("acct-1", { messages: [...short, ...short], prompt_cache_key: "session-1" })).toBe(key);
    expect(stickyKey("acct-1", { messages: short, prompt_cache_key: "session-2" })).not.toBe(key);
    // Another tenant sending the same constant key is another conversation.
    expect(stickyKey("acct-2", { messages: short, prompt_cache_key: "session-1" })).not.toBe(key);
  });

  it("is undefined for a prompt under 4,096 characters without prompt_cache_key (drawn at random)", () => {
    const system = "s".repeat(STICKY_PROMPT_CHARS - 20);
    expect(stickyKey("acct", { messages: [{ role: "user", content: "hello" }] })).toBeUndefined();
    expect(
      stickyKey("acct", {
        messages: [
          { role: "system", content: system },
          { role: "user", content: "hi" },
        ],
      }),
    ).toBeUndefined();
    expect(stickyKey("acct", { messages: [{ role: "user", content: "x" }], prompt_cache_key: "" })).toBeUndefined();
    expect(stickyKey("acct", { messages: [{ role: "user", content: "x" }], prompt_cache_key: 42 })).toBeUndefined();
  });

  it("is the same for every turn of a long conversation: its leading system messages and first user message", () => {
    const first = [
      { role: "system", content: LONG_SYSTEM },
      { role: "developer", content: "Answer in English." },
      { role: "user", content: "Fix the failing test." },
    ];
    const keys = turns(first, 6).map((body) => stickyKey("acct", body));
    expect(keys[0]).toBeDefined();
    expect(new Set(keys).size).toBe(1);
    // A system message later in the conversation (as Claude Code sends) is not part of the key.
    const later = { messages: [...first, { role: "system", content: "agent types: ..." }] };
    expect(stickyKey("acct", later)).toBe(keys[0]);
    // Another task, or another account, is another conversation.
    const other = [...first.slice(0, 2), { role: "user", content: "Write the docs." }];
    expect(stickyKey("acct", { messages: other })).not.toBe(keys[0]);
    expect(stickyKey("acct-2", { messages: first })).not.toBe(keys[0]);
  });

  it("becomes sticky once a conversation grows past the threshold, counting every message and tool", () => {
    const short = [{ role: "user", content: "Plan the refactor." }];
    expect(stickyKey("acct", { messages: short })).toBeUndefined();
    const grown = [...short, { role: "assistant", content: "p".repeat(STICKY_PROMPT_CHARS) }];
    const withTools = {
      messages: short,
      tools: [{ type: "function", function: { name: "write", description: "d".repeat(STICKY_PROMPT_CHARS) } }],
    };
    expect(stickyKey("acct", { messages: grown })).toBe(stickyKey("acct", withTools));
    expect(stickyKey("acct", { messages: grown })).toBeDefined();
  });
});
