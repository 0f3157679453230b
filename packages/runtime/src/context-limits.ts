import { AppError } from "./errors.ts";

/** The limits a context check needs (a plan narrows the model's), in tokens. */
export interface ContextLimits {
  contextWindow: bigint;
  maxOutputTokensCap: bigint;
  inputTokens: bigint;
  /** max_tokens / max_completion_tokens; 0 when the client gave neither. */
  requestedMaxOutputTokens: bigint;
}

/** Who sets each limit, for the messages ("This model's" / "This plan's"). */
export interface LimitSources {
  context: "model" | "plan";
  output: "model" | "plan";
}

const MODEL_LIMITS: LimitSources = { context: "model", output: "model" };

/**
 * The prompt must fit the context with room for output, and max_tokens must fit both the cap and
 * that room: 400 context_length_exceeded / max_tokens_exceeded. The edge checks
 * a request before admitting it; billing checks a plan's narrower limits the same way.
 */
export function checkContext(req: ContextLimits, sources: LimitSources = MODEL_LIMITS): void {
  const room = req.contextWindow - req.inputTokens;
  if (room < 0n || (room === 0n && req.requestedMaxOutputTokens === 0n)) {
    throw new AppError(
      "context_length_exceeded",
      `This ${sources.context}'s maximum context length is ${req.contextWindow} tokens, but the messages use ${req.inputTokens} tokens` +
        (room === 0n ? ", leaving no room for output." : "."),
      { param: "messages" },
    );
  }
  const requested = req.requestedMaxOutputTokens;
  if (requested > req.maxOutputTokensCap) {
    throw new AppError(
      "max_tokens_exceeded",
      `max_tokens is ${requested}, but this ${sources.output} allows at most ${req.maxOutputTokensCap} output tokens.`,
      { param: "max_tokens" },
    );
  }
  if (requested > room) {
    throw new AppError(
      "max_tokens_exceeded",
      `max_tokens is ${requested}, but only ${room} tokens are left in the ${req.contextWindow}-token context after the ${req.inputTokens}-token prompt.`,
      { param: "max_tokens" },
    );
  }
}
