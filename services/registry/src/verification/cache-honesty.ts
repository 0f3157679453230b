import type { VerificationCheck } from "@mkt/proto/registry/v1/registry";
import { CACHE_PROBE_MAX_TOKENS, CACHE_PROBE_MESSAGES } from "./probe-requests.ts";
import type { ProbeCall } from "./probe-call.ts";

/** The check's name in a run's checks (docs/verification.md). */
export const CACHE_CHECK = "cache_discount";

/** The cached count of a chat answer's usage: `usage.prompt_tokens_details.cached_tokens`. */
function cachedTokensOf(call: ProbeCall): number {
  const usage = (call.json as { usage?: { prompt_tokens_details?: { cached_tokens?: unknown } } } | undefined)?.usage;
  const cached = usage?.prompt_tokens_details?.cached_tokens;
  return typeof cached === "number" && Number.isFinite(cached) ? cached : 0;
}

/**
 * Whether an endpoint whose plan prices cached input below fresh input reports cache hits: the
 * same long prompt twice, and the second answer must report cached tokens. Shown, never held: a
 * server that reports none is charged the fresh price for every token, as its plan also states, so
 * no customer pays for a discount not given; they are told they will not get it.
 */
export async function cacheDiscountCheck(
  ask: (body: Record<string, unknown>) => Promise<ProbeCall>,
  modelId: string,
): Promise<VerificationCheck> {
  const body = { model: modelId, messages: CACHE_PROBE_MESSAGES, max_tokens: CACHE_PROBE_MAX_TOKENS };
  const result = (passed: boolean, detail: string): VerificationCheck => ({
    check: CACHE_CHECK,
    passed,
    detail,
    held: false,
  });
  const first = await ask(body);
  if (first.failure) return result(false, `cache discount not checked: ${first.failure}`);
  const second = await ask(body);
  if (second.failure || second.json === undefined) {
    return result(false, `cache discount not checked: ${second.failure ?? "no answer"}`);
  }
  const cached = cachedTokensOf(second);
  if (cached <= 0) {
    return result(false, "cache discount not given: the same prompt sent twice reported no cached tokens");
  }
  return result(true, `the same prompt sent twice reported ${cached} cached tokens`);
}
