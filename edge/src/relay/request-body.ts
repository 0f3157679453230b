import { AppError } from "@mkt/runtime/errors";

/**
 * Rewrites the client's JSON body for the upstream: its model name, the output cap billing
 * granted, and always streaming with usage so the relay can count what it relays; the client's
 * `models` fallback list and `provider` preferences are the gateway's, so they are dropped. Every other
 * field (temperature, tools, n, stop, response_format, ...) passes through untouched.
 */
export function upstreamBody(clientBody: Uint8Array, upstreamModel: string, maxOutputTokens: bigint): Buffer {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(clientBody).toString("utf8"));
  } catch {
    throw new AppError("invalid_request", "The request body is not valid JSON.");
  }
  if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new AppError("invalid_request", "The request body must be a JSON object.");
  }
  if (maxOutputTokens <= 0n) {
    throw new AppError("invalid_request", "No output tokens were granted for this request.", { param: "max_tokens" });
  }
  const body = parsed as Record<string, unknown>;
  const streamOptions =
    body.stream_options && typeof body.stream_options === "object" && !Array.isArray(body.stream_options)
      ? (body.stream_options as Record<string, unknown>)
      : {};
  delete body.max_completion_tokens;
  // The gateway's fallback list (the relay walks it); an upstream would refuse or misread it.
  delete body.models;
  delete body.provider;
  return Buffer.from(
    JSON.stringify({
      ...body,
      model: upstreamModel,
      max_tokens: Number(maxOutputTokens),
      stream: true,
      stream_options: { ...streamOptions, include_usage: true },
    }),
  );
}
