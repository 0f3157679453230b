import { Ajv } from "ajv";
import { countPromptTokens, countTextTokens } from "@mkt/runtime/tokens";
import { aboveTolerance } from "@mkt/runtime/usage-tolerance";
import { callServer, checkModels, ServerCheckError, type ServerCheckSettings } from "@mkt/runtime/server-checks";
import type { VerificationCheck } from "@mkt/proto/registry/v1/registry";
import { PROBE_PROMPT, PROBE_TOOL, PROBE_MAX_TOKENS, RUNAWAY_RATIO, RUNAWAY_SLACK_TOKENS } from "./probe-requests.ts";
import { cacheDiscountCheck } from "./cache-honesty.ts";
import type { ProbeCall } from "./probe-call.ts";

/** A run's checks and the answer of its main call (its live figures count it). */
export interface EndpointRun {
  checks: VerificationCheck[];
  passed: boolean;
  main: ProbeCall;
}

const validateArguments = new Ajv({ allErrors: false }).compile(PROBE_TOOL.function.parameters);

const check = (name: string, passed: boolean, detail: string, held = true): VerificationCheck => ({
  check: name,
  passed,
  detail,
  held,
});

/** POSTs a chat request to the hoster's server (callServer: bounded in time and size). */
async function postChat(
  endpoint: URL,
  token: string,
  body: Record<string, unknown>,
  settings: ServerCheckSettings,
): Promise<ProbeCall> {
  const started = performance.now();
  let answer;
  try {
    answer = await callServer(endpoint, { method: "POST", path: "/v1/chat/completions", token, json: body }, settings);
  } catch (err) {
    const failure = err instanceof ServerCheckError ? err.message : "the server could not be called";
    return { status: 0, latencyMs: performance.now() - started, failure };
  }
  const latencyMs = performance.now() - started;
  if (answer.status !== 200)
    return { status: answer.status, latencyMs, failure: `the server answered ${answer.status}` };
  const text = answer.body.toString("utf8");
  if (body.stream) {
    const events = text
      .split("\n")
      .filter((line) => line.startsWith("data: ") && line !== "data: [DONE]")
      .flatMap((line) => {
        try {
          return [JSON.parse(line.slice("data: ".length)) as unknown];
        } catch {
          return [];
        }
      });
    return { status: 200, latencyMs, events };
  }
  try {
    return { status: 200, latencyMs, json: JSON.parse(text) as unknown };
  } catch {
    return { status: 200, latencyMs, failure: "the answer is not JSON" };
  }
}

interface ChatAnswer {
  choices?: Array<{
    message?: { content?: unknown; tool_calls?: Array<{ function?: { name?: unknown; arguments?: unknown } }> };
  }>;
  usage?: { prompt_tokens?: unknown; completion_tokens?: unknown };
}

const isCount = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v >= 0;

/**
 * Token honesty and the output cap, from one answer to the fixed prompt with max_tokens 16: a
 * reported count above ours by more than max(5, 10%) fails honesty (the relay's own rule; a count
 * below ours is another tokenizer); a reported completion above 16, or an answer whose text we
 * count past the runaway tolerance, fails the cap. No usage report is not a lie.
 */
function countChecks(call: ProbeCall, promptTokens: number): VerificationCheck[] {
  if (call.failure || call.json === undefined) {
    const why = call.failure ?? "no answer";
    return [check("token_honesty", false, why), check("output_cap", false, why)];
  }
  const answer = call.json as ChatAnswer;
  const content = answer.choices?.[0]?.message?.content;
  const ours = typeof content === "string" ? countTextTokens(content) : 0;
  const usage = answer.usage;
  let honesty: VerificationCheck;
  if (usage === undefined || usage === null) {
    honesty = check("token_honesty", true, "no usage report (the gateway bills by its own count)");
  } else if (!isCount(usage.prompt_tokens) || !isCount(usage.completion_tokens)) {
    honesty = check("token_honesty", false, "the usage report's counts are not counts");
  } else if (aboveTolerance(BigInt(usage.prompt_tokens), BigInt(promptTokens))) {
    honesty = check(
      "token_honesty",
      false,
      `reported ${usage.prompt_tokens} prompt tokens; the gateway counts ${promptTokens}`,
    );
  } else if (aboveTolerance(BigInt(usage.completion_tokens), BigInt(ours))) {
    honesty = check(
      "token_honesty",
      false,
      `reported ${usage.completion_tokens} completion tokens for an answer the gateway counts as ${ours}`,
    );
  } else {
    honesty = check(
      "token_honesty",
      true,
      `reported ${usage.prompt_tokens} prompt tokens; the gateway counts ${promptTokens}`,
    );
  }
  const tolerance = Math.floor(PROBE_MAX_TOKENS * RUNAWAY_RATIO) + RUNAWAY_SLACK_TOKENS;
  const reportedCompletion = isCount(usage?.completion_tokens) ? usage.completion_tokens : undefined;
  let cap: VerificationCheck;
  if (reportedCompletion !== undefined && reportedCompletion > PROBE_MAX_TOKENS) {
    cap = check("output_cap", false, `asked for ${PROBE_MAX_TOKENS} tokens at most; reported ${reportedCompletion}`);
  } else if (ours > tolerance) {
    cap = check("output_cap", false, `asked for ${PROBE_MAX_TOKENS} tokens at most; sent ${ours}`);
  } else {
    cap = check("output_cap", true, `asked for ${PROBE_MAX_TOKENS} tokens at most; sent ${ours}`);
  }
  return [honesty, cap];
}

/** `tool_choice: required` must yield a call of the tool whose arguments parse and fit its schema. */
function toolCheck(call: ProbeCall): VerificationCheck {
  if (call.failure || call.json === undefined) return check("tool_calls", false, call.failure ?? "no answer");
  const toolCall = (call.json as ChatAnswer).choices?.[0]?.message?.tool_calls?.[0];
  if (!toolCall) return check("tool_calls", false, "no tool call for tool_choice required");
  if (toolCall.function?.name !== PROBE_TOOL.function.name) return check("tool_calls", false, "a call of another tool");
  let args: unknown;
  try {
    args = JSON.parse(String(toolCall.function.arguments));
  } catch {
    return check("tool_calls", false, "the arguments are not JSON");
  }
  if (!validateArguments(args)) return check("tool_calls", false, "the arguments do not match the tool's schema");
  return check("tool_calls", true, "valid arguments for the tool's schema");
}

/** `stream_options.include_usage` should yield a chunk with usage: shown, not held against the hoster. */
function streamingUsageCheck(call: ProbeCall): VerificationCheck {
  if (call.failure || !call.events) return check("streaming_usage", false, call.failure ?? "no answer", false);
  const found = call.events.some((e) => typeof e === "object" && e !== null && "usage" in e && e.usage);
  return check(
    "streaming_usage",
    found,
    found ? "a usage chunk with include_usage" : "no usage chunk with include_usage",
    false,
  );
}

/**
 * One verification run of a hoster's model: is it still listed, does it report tokens honestly,
 * honour max_tokens and return valid tool calls, and (shown only) does it send a usage chunk when
 * streaming and, when `cacheDiscount` (a plan of it prices cached input below fresh input), does a
 * repeated prompt report cached tokens. Calls go straight to the hoster's server with its token:
 * unbilled, never anyone's usage. The run passes when every held check does.
 */
export async function verifyEndpoint(
  endpoint: URL,
  token: string,
  modelId: string,
  settings: ServerCheckSettings,
  { cacheDiscount = false }: { cacheDiscount?: boolean } = {},
): Promise<EndpointRun> {
  const checks: VerificationCheck[] = [];
  try {
    await checkModels(endpoint, token, [modelId], settings);
    checks.push(check("model_listed", true, "listed in GET /v1/models"));
  } catch (err) {
    const detail = err instanceof ServerCheckError ? err.message : "GET /v1/models failed";
    checks.push(check("model_listed", false, detail));
  }
  const messages = [{ role: "user", content: PROBE_PROMPT }];
  const main = await postChat(endpoint, token, { model: modelId, messages, max_tokens: PROBE_MAX_TOKENS }, settings);
  checks.push(...countChecks(main, countPromptTokens(messages)));
  const tools = await postChat(
    endpoint,
    token,
    {
      model: modelId,
      messages: [{ role: "user", content: "What is the weather in Oslo? Call the tool." }],
      tools: [PROBE_TOOL],
      tool_choice: "required",
      max_tokens: 256,
    },
    settings,
  );
  checks.push(toolCheck(tools));
  const streamed = await postChat(
    endpoint,
    token,
    {
      model: modelId,
      messages: [{ role: "user", content: "Say hello." }],
      max_tokens: 8,
      stream: true,
      stream_options: { include_usage: true },
    },
    settings,
  );
  checks.push(streamingUsageCheck(streamed));
  if (cacheDiscount)
    checks.push(await cacheDiscountCheck((body) => postChat(endpoint, token, body, settings), modelId));
  return { checks, passed: checks.every((c) => c.passed || !c.held), main };
}
