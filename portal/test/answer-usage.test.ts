import { describe, expect, it } from "vitest";
import { answerUsageLine } from "../src/lib/answer-usage.ts";

describe("answerUsageLine", () => {
  it("shows the tokens and the answer's own usage.cost in dollars, to the micro-dollar", () => {
    expect(answerUsageLine({ prompt_tokens: 1200, completion_tokens: 34, total_tokens: 1234, cost: 0.000043 })).toBe(
      "1,200 tokens in, 34 tokens out · cost $0.000043",
    );
    expect(answerUsageLine({ prompt_tokens: 900, completion_tokens: 4000, total_tokens: 4900, cost: 1.234567 })).toBe(
      "900 tokens in, 4,000 tokens out · cost $1.234567",
    );
    expect(answerUsageLine({ prompt_tokens: 3, completion_tokens: 2, total_tokens: 5, cost: 0 })).toBe(
      "3 tokens in, 2 tokens out · cost $0.00",
    );
  });

  it("says how many tokens in were read from the model's prompt cache", () => {
    const usage = {
      prompt_tokens: 1850,
      completion_tokens: 40,
      total_tokens: 1890,
      prompt_tokens_details: { cached_tokens: 1795 },
      cost: 0.000178,
    };
    expect(answerUsageLine(usage)).toBe("1,850 tokens in (1,795 from cache), 40 tokens out · cost $0.000178");
    const none = { ...usage, prompt_tokens_details: { cached_tokens: 0 } };
    expect(answerUsageLine(none)).toBe("1,850 tokens in, 40 tokens out · cost $0.000178");
  });

  it("makes up no cost when the usage has none", () => {
    expect(answerUsageLine({ prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 })).toBe(
      "3 tokens in, 2 tokens out · its cost will appear under Usage once it is settled (seconds)",
    );
  });

  it("says an answer cut short before its usage will be priced under Usage", () => {
    expect(answerUsageLine(undefined)).toBe(
      "This answer was cut short before its usage arrived; its cost will appear under Usage once it is settled (seconds).",
    );
  });
});
