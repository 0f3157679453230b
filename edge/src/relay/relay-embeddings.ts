import type { Logger } from "@mkt/runtime/logger";
import { microsToUsd } from "@mkt/runtime/money";
import type { UpstreamTarget } from "../routing/upstream-target.ts";
import { NOTHING_BILLED, validCount } from "./billed-usage.ts";
import type { RelayDeps } from "./relay-answer.ts";
import type { RelayRequest } from "./relay-request.ts";
import { UpstreamFailure, type UpstreamLimits } from "./stream-chat.ts";
import { upstreamAppError } from "./upstream-error.ts";
import type { UpstreamPools } from "./upstream-pools.ts";
import { isUpstreamFault, liveCandidates } from "./upstream-failover.ts";
import { usageCost } from "./usage-cost.ts";
import { usageCompleted } from "./usage-event.ts";

type Json = Record<string, unknown>;

/** What the client asked for, to check the upstream's answer against. */
export interface EmbeddingsExpected {
  /** How many inputs were sent: the answer has one embedding for each. */
  inputs: number;
  encodingFormat: "float" | "base64";
}

const TIMEOUT_CODES = new Set(["UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT"]);

const isObject = (v: unknown): v is Json => !!v && typeof v === "object" && !Array.isArray(v);

/**
 * Relays one admitted embeddings request (a single JSON answer, no stream) to the first of the
 * route's live servers that answers, with the chat relay's pools, endpoint guard, failover and
 * outlier ejection, and publishes its one usage event (output 0) through the same publisher
 * before the answer is returned, so no client holds an answer whose usage could be lost. Billed
 * input is the upstream's report where it is below our count, else our count. Returns the JSON
 * text to send, or undefined when the client left (nothing billed); throws an AppError (the HTTP
 * error) when no server answered.
 */
export async function relayEmbeddings(
  deps: RelayDeps,
  request: RelayRequest,
  expected: EmbeddingsExpected,
  control: { clientGone: AbortSignal; clientConnected: () => boolean },
): Promise<string | undefined> {
  const started = Date.now();
  const log = deps.log.child({ requestId: request.requestId });
  const { route } = request;
  let upstreamStatus = 0;
  const record = async (errorCode: string, inputTokens: bigint, reported?: unknown) => {
    deps.metrics.upstreamRequests.inc({ provider: route.provider || "none", code: errorCode || "ok" });
    await deps.usage.publish(
      usageCompleted(
        request,
        {
          route,
          inputTokens,
          outputTokens: 0n,
          cachedInputTokens: 0n,
          reasoningTokens: 0n,
          errorCode,
          finishReason: errorCode === "" ? "stop" : errorCode === "client_cancelled" ? "" : "error",
          reported: { promptTokens: reported, completionTokens: 0 },
          upstreamStatus,
        },
        started,
      ),
    );
  };

  let answer: Json;
  try {
    answer = await answerFrom(deps, request, expected, control.clientGone, log, (s) => (upstreamStatus = s));
  } catch (err) {
    const cancelled = control.clientGone.aborted;
    const appError = cancelled ? undefined : upstreamAppError(err, log, "embeddings");
    await record(appError?.code ?? "client_cancelled", 0n);
    if (!appError) return undefined;
    throw appError;
  }
  const reported = isObject(answer.usage) ? answer.usage.prompt_tokens : undefined;
  const counted = await request.promptTokens;
  const report = validCount(reported);
  const inputTokens = report !== undefined && report < counted ? report : counted;
  const cost = usageCost(request, route, { ...NOTHING_BILLED, inputTokens });
  if (!control.clientConnected()) {
    await record("client_cancelled", 0n, reported);
    return undefined;
  }
  await record("", inputTokens, reported);
  return JSON.stringify({
    object: "list",
    data: answer.data,
    model: route.modelId,
    usage: { prompt_tokens: Number(inputTokens), total_tokens: Number(inputTokens), cost: microsToUsd(cost) },
  });
}

/** The route's live servers in order, moving on only from a server's fault. */
async function answerFrom(
  deps: RelayDeps,
  request: RelayRequest,
  expected: EmbeddingsExpected,
  cancel: AbortSignal,
  log: Logger,
  onStatus: (status: number) => void,
): Promise<Json> {
  const targets = liveCandidates(deps.upstreams, deps.outliers, request.route);
  for (const [i, target] of targets.entries()) {
    try {
      const body = Buffer.from(
        JSON.stringify({ ...(JSON.parse(Buffer.from(request.body).toString()) as Json), model: target.upstreamModel }),
      );
      const answer = checkedAnswer(
        await postEmbeddings(deps.pools, target, body, deps.limits, cancel, log, onStatus),
        expected,
      );
      deps.outliers.succeeded(target.key);
      return answer;
    } catch (err) {
      if (cancel.aborted || !isUpstreamFault(err)) throw err;
      if (deps.outliers.failed(target.key)) {
        log.warn({ upstream: target.key }, "upstream ejected after failures");
        deps.revival
          ?.ejected(request.route)
          .catch((probeErr: unknown) => log.warn({ err: probeErr }, "probing ejected upstreams failed"));
      }
      if (i === targets.length - 1) throw err;
      log.warn({ upstream: target.key, code: err.code }, "upstream failed to embed; trying the next");
    }
  }
  throw new UpstreamFailure("upstream_error", "no upstream answered");
}

/**
 * POSTs the body to the server's `/v1/embeddings` and reads its JSON answer, within the relay's
 * total time and response size limits. Throws UpstreamFailure as streamChat does.
 */
async function postEmbeddings(
  pools: UpstreamPools,
  target: UpstreamTarget,
  body: Buffer,
  limits: UpstreamLimits,
  cancel: AbortSignal,
  log: Logger,
  onStatus: (status: number) => void,
): Promise<unknown> {
  const url = new URL(target.baseUrl);
  const timeout = new AbortController();
  const timer = setTimeout(() => timeout.abort(), limits.totalMs);
  try {
    if (cancel.aborted) throw new UpstreamFailure("client_cancelled", "caller cancelled");
    const response = await pools.get(url.origin, target.trust).request({
      method: "POST",
      path: `${url.pathname.replace(/\/+$/, "")}/v1/embeddings`,
      headers: {
        "content-type": "application/json",
        accept: "application/json",
        authorization: `Bearer ${target.token}`,
      },
      body,
      signal: AbortSignal.any([cancel, timeout.signal]),
    });
    onStatus(response.statusCode);
    if (response.statusCode < 200 || response.statusCode > 299) {
      log.warn(
        { status: response.statusCode, origin: url.origin },
        "upstream answered embeddings with an error status",
      );
      await response.body.dump({ limit: 64 * 1024 }).catch(() => undefined);
      throw new UpstreamFailure("upstream_error", `upstream status ${response.statusCode}`, response.statusCode);
    }
    const pieces: Buffer[] = [];
    let bytes = 0;
    for await (const piece of response.body) {
      bytes += (piece as Buffer).length;
      if (bytes > limits.maxResponseBytes) {
        response.body.destroy();
        log.warn({ origin: url.origin, bytes }, "upstream response exceeded its size limit");
        throw new UpstreamFailure("upstream_error", "upstream response too large");
      }
      pieces.push(piece as Buffer);
    }
    try {
      return JSON.parse(Buffer.concat(pieces).toString("utf8"));
    } catch {
      throw new UpstreamFailure("upstream_error", "upstream answer is not JSON");
    }
  } catch (err) {
    if (err instanceof UpstreamFailure) throw err;
    if (cancel.aborted) throw new UpstreamFailure("client_cancelled", "caller cancelled");
    if (timeout.signal.aborted) throw new UpstreamFailure("upstream_timeout", "upstream total timeout");
    const code = (err as { code?: string } | undefined)?.code ?? "";
    if (TIMEOUT_CODES.has(code)) throw new UpstreamFailure("upstream_timeout", `upstream timeout (${code})`);
    throw new UpstreamFailure("upstream_error", `upstream call failed (${code || (err as Error)?.name})`);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The upstream's answer when it is one embedding per input, each at its index in the encoding
 * asked for; anything else is the server's fault (a client must never get fewer vectors, or
 * vectors out of order, than it sent inputs).
 */
function checkedAnswer(answer: unknown, expected: EmbeddingsExpected): Json {
  const data = isObject(answer) ? answer.data : undefined;
  if (!Array.isArray(data) || data.length !== expected.inputs) {
    throw new UpstreamFailure("upstream_error", "upstream answer has not one embedding per input");
  }
  const ordered: Json[] = new Array<Json>(expected.inputs);
  for (const item of data) {
    const index = isObject(item) ? item.index : undefined;
    const embedding = isObject(item) ? item.embedding : undefined;
    const wellFormed =
      expected.encodingFormat === "base64"
        ? typeof embedding === "string"
        : Array.isArray(embedding) && embedding.every((v) => typeof v === "number");
    if (
      typeof index !== "number" ||
      !Number.isInteger(index) ||
      index < 0 ||
      index >= expected.inputs ||
      ordered[index] ||
      !wellFormed
    ) {
      throw new UpstreamFailure("upstream_error", "upstream answer has a malformed embedding");
    }
    ordered[index] = { object: "embedding", index, embedding };
  }
  return { ...(answer as Json), data: ordered };
}
