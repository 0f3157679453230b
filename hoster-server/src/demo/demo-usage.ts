import { countPromptTokens } from "@mkt/runtime/tokens";
import type { ChatRequest } from "../chat-request.ts";
import type { DemoReply } from "./demo-reply.ts";

/** A chat answer's `usage`, with the details vLLM always sends. */
export interface DemoUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
  completion_tokens_details: { reasoning_tokens: number };
}

/**
 * Usage of the answers `demos` to `chat`, whose first `cachedMessages` messages the model had
 * seen before. The prompt is counted with the gateway's own function, and so is the cached run,
 * with the same tools: the run's count is part of the prompt's, and the last message, which is
 * never cached, keeps it below.
 */
export function demoUsage(chat: ChatRequest, cachedMessages: number, demos: readonly DemoReply[]): DemoUsage {
  const tools = { tools: chat.toolDefinitions };
  const promptTokens = countPromptTokens(chat.messages, tools);
  const cachedTokens = cachedMessages > 0 ? countPromptTokens(chat.messages.slice(0, cachedMessages), tools) : 0;
  if (cachedTokens >= promptTokens) {
    throw new Error(`cached tokens ${cachedTokens} not below the prompt's ${promptTokens}`);
  }
  const completionTokens = demos.reduce((sum, d) => sum + d.completionTokens, 0);
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: cachedTokens },
    completion_tokens_details: { reasoning_tokens: demos.reduce((sum, d) => sum + d.reasoningTokens, 0) },
  };
}
