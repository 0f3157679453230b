import type { ChatResult } from "./chat-stream.ts";
import { count, usd } from "./format.ts";

/** Where an answer's cost is found when the answer itself did not say it. */
const SETTLED_LATER = "its cost will appear under Usage once it is settled (seconds)";

/**
 * The line under a playground answer: its tokens in (those read from the model's prompt cache,
 * priced lower, said apart) and out and its cost, all from the answer's own `usage` (the cost from
 * `usage.cost`). The portal never prices an answer itself, so an answer
 * that ended without its usage (cut short by an error or a dropped connection), or whose usage has
 * no cost, points at the Usage page, where settlement records what it was charged.
 */
export function answerUsageLine(usage: ChatResult["usage"]): string {
  if (!usage) return `This answer was cut short before its usage arrived; ${SETTLED_LATER}.`;
  const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
  const tokensIn = `${count(usage.prompt_tokens)} tokens in${cached > 0 ? ` (${count(cached)} from cache)` : ""}`;
  const tokens = `${tokensIn}, ${count(usage.completion_tokens)} tokens out`;
  return `${tokens} · ${usage.cost === undefined ? SETTLED_LATER : `cost ${usd(usage.cost, { exact: true })}`}`;
}
