import { dependencyUnavailable, isDependencyOutage } from "@mkt/runtime/dependency-outage";
import { AppError } from "@mkt/runtime/errors";
import type { RequestThenStream } from "@mkt/runtime/grpc-server";
import type { Logger } from "@mkt/runtime/logger";
import { usageCompleted } from "@mkt/runtime/usage-event";
import { ChatCompletionResponse, type ChatCompletionRequest, type Route } from "@mkt/proto/registry/v1/registry";
import type { ModelCatalog, UpstreamTarget } from "../catalog/model-catalog.ts";
import type { UsageMismatchRecorder } from "../hosters/usage-mismatch-recorder.ts";
import type { RegistryMetrics } from "../metrics/registry-metrics.ts";
import { streamChat, UpstreamFailure, type UpstreamLimits } from "../upstream/stream-chat.ts";
import type { EjectionProber } from "../upstream/ejection-prober.ts";
import type { OutlierTracker } from "../upstream/outlier-tracker.ts";
import type { UpstreamPools } from "../upstream/upstream-pools.ts";
import type { UsagePublisher } from "../usage/usage-publisher.ts";
import { billedUsage, type BilledUsage } from "./billed-usage.ts";
import { ChunkAccumulator } from "./chunk-accumulator.ts";
import { runawayLimit, type RunawayGuard } from "./output-budget.ts";
import { upstreamBody } from "./request-body.ts";
import { relayThroughFirstAnswer } from "./upstream-failover.ts";
import { usageMismatch } from "./usage-check.ts";
import { usageCost } from "./usage-cost.ts";

export interface ChatDeps {
  catalog: ModelCatalog;
  pools: UpstreamPools;
  limits: UpstreamLimits;
  /** How far past max_tokens (by our count) a choice may run before the relay cuts it. */
  runaway: RunawayGuard;
  /** Handlers still running (so shutdown can wait for their usage events). */
  inflight: Set<Promise<void>>;
  /**
   * Aborted when the shutdown grace is over: streams still running stop reading their upstream and
   * end with a final `service_unavailable` event, written after every chunk they relayed.
   */
  shutdown?: AbortSignal;
  /** Ejects servers after live failures in a row; the relay skips ejected ones. */
  outliers: Pick<OutlierTracker, "isEjected" | "succeeded" | "failed">;
  /** Probes a model's servers back into routing once every one of them is ejected. */
  revival?: Pick<EjectionProber, "ejected">;
  /** Makes the usage event durable (JetStream or the outbox) before the call ends. */
  usage: Pick<UsagePublisher, "publish">;
  /** Flags hosters whose usage reports disagree with the registry's count. */
  mismatches: Pick<UsageMismatchRecorder, "record">;
  metrics: Pick<RegistryMetrics, "upstreamRequests" | "upstreamFirstEvent" | "outputRunaways">;
  log: Logger;
}

type Call = RequestThenStream<ChatCompletionRequest, ChatCompletionResponse>["call"];

const NOTHING_BILLED: BilledUsage = { inputTokens: 0n, outputTokens: 0n };

/** What the caller is told; generic on purpose: never an upstream body, URL or token. */
const UPSTREAM_MESSAGES = {
  upstream_error: "The model server failed to answer the request.",
  upstream_timeout: "The model server did not answer in time.",
} as const;

function toAppError(err: unknown, log: Logger): AppError {
  if (err instanceof AppError) return err;
  if (err instanceof UpstreamFailure && err.code !== "client_cancelled") {
    return new AppError(err.code, UPSTREAM_MESSAGES[err.code]);
  }
  // A hoster's row read while the database is down: the caller may retry, it is not a bug.
  if (isDependencyOutage(err)) {
    log.warn({ err }, "chat completion failed: a dependency is unavailable");
    return dependencyUnavailable(err);
  }
  log.error({ err }, "chat completion failed");
  return new AppError("internal_error", "Internal error.");
}

/** Writes one event, waiting for the transport to drain (or the caller to leave) when it is full. */
async function send(call: Call, event: ChatCompletionResponse, cancelled: AbortSignal): Promise<void> {
  if (cancelled.aborted) throw new UpstreamFailure("client_cancelled", "caller cancelled");
  if (call.write(event)) return;
  await new Promise<void>((resolve) => {
    const done = () => {
      call.off("drain", done);
      cancelled.removeEventListener("abort", done);
      resolve();
    };
    call.on("drain", done);
    cancelled.addEventListener("abort", done, { once: true });
  });
}

const json = (value: unknown) => Buffer.from(JSON.stringify(value));

/** A chat completion's id is ours (DESIGN.md §4): the request id, which also keys its usage. */
const completionId = (requestId: string) => `chatcmpl-${requestId}`;

const SHUTTING_DOWN = "The server is shutting down; please retry the request.";

/**
 * Waits for the caller's half-close, its word that the answer reached its client (DESIGN.md §5;
 * docs/decisions.md, "Answers that did not reach their client whole"); a cancel first is the
 * caller's leaving.
 */
async function untilDelivered(halfClosed: Promise<void>, cancelled: AbortSignal): Promise<void> {
  if (cancelled.aborted) throw new UpstreamFailure("client_cancelled", "caller cancelled");
  let onAbort!: () => void;
  const left = new Promise<never>((_, reject) => {
    onAbort = () => reject(new UpstreamFailure("client_cancelled", "caller cancelled before the answer was delivered"));
    cancelled.addEventListener("abort", onAbort, { once: true });
  });
  try {
    await Promise.race([halfClosed, left]);
  } finally {
    cancelled.removeEventListener("abort", onAbort);
  }
}

/**
 * ChatCompletion: relays one request to the route's upstream. A server that fails before anything
 * reached the caller hands the request to the route's next server (same model and price; ejected
 * servers are skipped, none left is no_healthy_upstream), then to the client's fallback routes in
 * order (`models`; the usage event names the route that answered). Failures before the first event are
 * gRPC errors; after it, a final `error` event and no retry. The upstream stops at max_tokens itself;
 * only a choice that runs well past it (the runaway guard, DESIGN.md §5) is cut, with finish_reason
 * `length`, and once every choice has ended the upstream call is closed. On every exit
 * path exactly one usage.completed event is made durable
 * (acked by JetStream, or in the outbox) before the call ends. A whole answer ends with an `end`
 * event and counts as a success only once the caller half-closes (its client has it); a caller
 * that cancels or is lost before is `client_cancelled`, billed what was sent.
 */
export function chatCompletion(
  deps: ChatDeps,
): (stream: RequestThenStream<ChatCompletionRequest, ChatCompletionResponse>) => Promise<void> {
  return async ({ request, call, halfClosed }) => {
    const work = relay(deps, request, call, halfClosed);
    deps.inflight.add(work);
    try {
      await work;
    } finally {
      deps.inflight.delete(work);
    }
  };
}

async function relay(
  deps: ChatDeps,
  request: ChatCompletionRequest,
  call: Call,
  halfClosed: Promise<void>,
): Promise<void> {
  const handlerStart = Date.now();
  const log = deps.log.child({ requestId: request.requestId });
  const cancel = new AbortController();
  const onCancel = () => cancel.abort();
  call.on("cancelled", onCancel);
  if (call.cancelled) cancel.abort();
  // Shutdown's cut is not the caller's cancel: the call stays open for the final event, so the
  // caller receives everything counted as delivered (and billed).
  const callGone = new AbortController();
  const onGone = () => callGone.abort();
  call.on("cancelled", onGone);
  let cutByShutdown = false;
  const onShutdown = () => {
    cutByShutdown = true;
    cancel.abort();
  };
  deps.shutdown?.addEventListener("abort", onShutdown, { once: true });

  // The route being tried: the first, then (failover to the client's fallbacks) the one that answered.
  let route = request.route;
  let accumulator: ChunkAccumulator | undefined;
  let written = 0;
  let billed: BilledUsage;
  let errorCode = "";
  let failure: AppError | undefined;
  // max_tokens bounds each of the client's `n` choices upstream: the request may use n caps.
  const outputCap = request.maxOutputTokens * (request.choices > 1n ? request.choices : 1n);
  const bill = (delivered = accumulator?.deliveredTokens() ?? 0n) =>
    billedUsage({
      reported: accumulator?.reportedUsage,
      promptTokens: request.promptTokens,
      deliveredOutputTokens: delivered,
      maxOutputTokens: outputCap,
    });

  try {
    if (!route) throw new AppError("invalid_request", "A route is required.");
    const relayFrom = async (provider: string, target: UpstreamTarget, acc: ChunkAccumulator) => {
      const body = upstreamBody(request.body, target.upstreamModel, request.maxOutputTokens);
      const events = streamChat(deps.pools, target, body, deps.limits, cancel.signal, log);
      const sent = performance.now();
      let waitingForFirst = true;
      for await (const batch of events) {
        if (waitingForFirst) {
          waitingForFirst = false;
          deps.metrics.upstreamFirstEvent.observe({ provider }, (performance.now() - sent) / 1000);
        }
        // The chunks of one read go out as one message. Those taken before a bad one are sent
        // before its error: they count as delivered (and billed) once the accumulator took them.
        const texts: Buffer[] = [];
        try {
          for (const data of batch) {
            if (!request.stream) {
              acc.accept(data);
            } else {
              const text = acc.relayText(data);
              if (text !== undefined) texts.push(Buffer.from(text));
            }
            if (acc.stoppedByGuard) break;
          }
        } finally {
          if (texts.length > 0) {
            const event = texts.length === 1 ? { chunk: texts[0] } : { chunks: { chunks: texts } };
            await send(call, ChatCompletionResponse.fromPartial(event), cancel.signal);
            written += texts.length;
          }
        }
        // Every choice ended, one cut by the guard: the rest of a runaway is not worth reading.
        if (acc.stoppedByGuard) break; // leaving the loop closes the upstream connection (streamChat's finally)
      }
      if (!acc.finished) throw new UpstreamFailure("upstream_error", "upstream stream ended early");
    };
    // Failover: the next server, then the next route, only while nothing reached the caller.
    await relayThroughFirstAnswer(
      { catalog: deps.catalog, outliers: deps.outliers, revival: deps.revival, log },
      [route, ...request.fallbackRoutes],
      (next, target) => {
        route = next;
        accumulator = new ChunkAccumulator(
          completionId(request.requestId),
          next.modelId,
          runawayLimit(request.maxOutputTokens, deps.runaway),
        );
        return relayFrom(next.provider, target, accumulator);
      },
      { cancelled: cancel.signal, reachedCaller: () => written > 0 },
    );
    if (!accumulator?.finished) throw new UpstreamFailure("upstream_error", "upstream stream ended early");
    const delivered = accumulator.deliveredTokens();
    billed = bill(delivered);
    checkReportedUsage(deps, request, route, accumulator, delivered, outputCap);
    const cost = usageCost(request, route, billed);
    if (request.stream) {
      if (request.includeUsage) {
        await send(
          call,
          ChatCompletionResponse.fromPartial({ chunk: json(accumulator.usageChunk(billed, cost)) }),
          cancel.signal,
        );
      }
    } else {
      await send(
        call,
        ChatCompletionResponse.fromPartial({ completion: json(accumulator.completion(billed, cost)) }),
        cancel.signal,
      );
      written++;
    }
    await send(call, ChatCompletionResponse.fromPartial({ end: {} }), cancel.signal);
    await untilDelivered(halfClosed, cancel.signal);
  } catch (err) {
    const cut = cutByShutdown && !call.cancelled;
    const cancelled =
      !cut && (cancel.signal.aborted || (err instanceof UpstreamFailure && err.code === "client_cancelled"));
    const appError = cut
      ? new AppError("service_unavailable", SHUTTING_DOWN)
      : cancelled
        ? undefined
        : toAppError(err, log);
    errorCode = appError?.code ?? "client_cancelled";
    // The caller pays for what reached it; a request that failed before anything did costs nothing.
    billed = written > 0 ? bill() : NOTHING_BILLED;
    log.info({ errorCode, written }, "chat completion ended early");
    if (appError && written > 0) {
      // Mid-stream: the caller already has a 200 and chunks, so the failure is a final event.
      const event = ChatCompletionResponse.fromPartial({ error: { code: appError.code, message: appError.message } });
      await send(call, event, cut ? callGone.signal : cancel.signal).catch(() => undefined);
    } else {
      failure = appError;
    }
  } finally {
    call.off("cancelled", onCancel);
    call.off("cancelled", onGone);
    deps.shutdown?.removeEventListener("abort", onShutdown);
  }
  if (route && accumulator?.cutByGuard) reportRunaway(deps, request, route, accumulator, log);
  const answer: AnswerEnd = {
    firstTokenAt: written > 0 ? accumulator?.firstChoiceAt : undefined,
    // What the caller's answer ended with: the model's reason, an error event or status, or
    // nothing when the caller left.
    finishReason:
      errorCode === "" ? (accumulator?.finishReason ?? "") : errorCode === "client_cancelled" ? "" : "error",
  };
  await finish(deps, request, route, billed, errorCode, answer, handlerStart);
  if (failure) throw failure;
}

/**
 * Flags a hoster whose usage report claims more than the registry relayed or the cap allows
 * (DESIGN.md §5; usageMismatch says how an answer the runaway guard cut is judged).
 */
function checkReportedUsage(
  deps: ChatDeps,
  request: ChatCompletionRequest,
  route: Route,
  acc: ChunkAccumulator,
  delivered: bigint,
  outputCap: bigint,
) {
  if (route.provider !== "hoster") return;
  const mismatch = usageMismatch({
    reported: acc.reportedUsage,
    promptTokens: request.promptTokens,
    deliveredOutputTokens: delivered,
    maxOutputTokens: outputCap,
    relayedWhole: !acc.cutByGuard,
  });
  if (mismatch) deps.mismatches.record(route.hosterId, mismatch);
}

/**
 * The runaway guard cut a choice: the upstream ignored max_tokens. Worth a line and a per-hoster
 * count (an operator sees which server does it); the caller got a proper end and pays at most the cap.
 */
function reportRunaway(
  deps: ChatDeps,
  request: ChatCompletionRequest,
  route: Route,
  acc: ChunkAccumulator,
  log: Logger,
) {
  deps.metrics.outputRunaways.inc({ provider: route.provider, hoster_id: route.hosterId });
  log.warn(
    {
      provider: route.provider,
      hosterId: route.hosterId || undefined,
      modelId: route.modelId,
      maxTokens: Number(request.maxOutputTokens),
      choiceLimit: acc.choiceLimit,
    },
    "upstream ran past max_tokens; the runaway guard cut the answer",
  );
}

/** How the caller's answer went, for the usage event. */
interface AnswerEnd {
  /** When (epoch ms) the first choice reached the caller; undefined when none did. */
  firstTokenAt: number | undefined;
  /** The answer's finish_reason, `error`, or '' when it has none. */
  finishReason: string;
}

/** Records the outcome; a failure to do so never reaches the caller. */
async function finish(
  deps: ChatDeps,
  request: ChatCompletionRequest,
  route: Route | undefined,
  billed: BilledUsage,
  errorCode: string,
  answer: AnswerEnd,
  handlerStart: number,
): Promise<void> {
  deps.metrics.upstreamRequests.inc({ provider: route?.provider || "none", code: errorCode || "ok" });
  await deps.usage.publish(
    usageCompleted(
      request,
      {
        route,
        inputTokens: billed.inputTokens,
        outputTokens: billed.outputTokens,
        errorCode,
        finishReason: answer.finishReason,
        firstTokenAt: answer.firstTokenAt,
      },
      handlerStart,
    ),
  );
}
