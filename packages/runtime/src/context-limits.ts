import { AppError } from "./errors.ts";

/** The limits a context check needs (a plan narrows the model's), in tokens. */
export interface ContextLimits {
  contextWindow: bigint;
  maxOutputTokensCap: bigint;
  inputTokens: bigint;
}

/** Who sets the context limit, for the message ("This model's" / "This plan's"). */
export type ContextSource = "model" | "plan";

/**
 * The most output tokens a request may be served: the smaller of the output cap and the room the
 * prompt leaves in the context. A prompt that leaves no room is 400 context_length_exceeded.
 * An output field above it is lowered to it, never refused (servedOutputTokens): agents ask for
 * tens of thousands of tokens whatever the model, and the answer says where it stopped.
 */
export function outputCeiling(req: ContextLimits, source: ContextSource = "model"): bigint {
  const room = req.contextWindow - req.inputTokens;
  if (room <= 0n) {
    throw new AppError(
      "context_length_exceeded",
      `This ${source}'s maximum context length is ${req.contextWindow} tokens, but the messages use ${req.inputTokens} tokens` +
        (room === 0n ? ", leaving no room for output." : "."),
      { param: "messages" },
    );
  }
  return req.maxOutputTokensCap < room ? req.maxOutputTokensCap : room;
}

/**
 * The output cap a request is served with: the client's field (`max_tokens`,
 * `max_completion_tokens`, `max_output_tokens`) lowered to the ceiling; 0 (none given) stays 0,
 * for admission to size from the ceiling and the credit.
 */
export function servedOutputTokens(requested: bigint, ceiling: bigint): bigint {
  return requested > ceiling ? ceiling : requested;
}
