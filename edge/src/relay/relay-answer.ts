import { AppError } from "@mkt/runtime/errors";
import type { Logger } from "@mkt/runtime/logger";
import type { Route } from "@mkt/proto/registry/v1/registry";
import type { UpstreamDirectory, UpstreamTarget } from "../routing/upstream-target.ts";
import { billedUsage, NOTHING_BILLED, type BilledUsage } from "./billed-usage.ts";
import { ChunkAccumulator } from "./chunk-accumulator.ts";
import type { EjectionProber } from "./ejection-prober.ts";
import type { OutlierTracker } from "./outlier-tracker.ts";
import { runawayLimit, type RunawayGuard } from "./output-budget.ts";
import type { RelayMetrics } from "./relay-metrics.ts";
import type { RelayRequest } from "./relay-request.ts";
import { upstreamBody } from "./request-body.ts";
import { streamChat, UpstreamFailure, type UpstreamLimits } from "./stream-chat.ts";
import { upstreamAppError } from "./upstream-error.ts";
import type { UpstreamPools } from "./upstream-pools.ts";
import { isUpstreamFault, liveCandidates } from "./upstream-failover.ts";
import { movesOn } from "../routing/next-endpoint.ts";
import { usageMismatch, type UsageMismatch } from "./usage-check.ts";
import { usageCost } from "./usage-cost.ts";
import { usageCompleted } from "./usage-event.ts";
import type { UsagePublisher } from "./usage-publisher.ts";

export interface RelayDeps {
  /** The routing table: a route's upstream servers, with their credentials. */
  upstreams: UpstreamDirectory;
  pools: UpstreamPools;
  limits: UpstreamLimits;
  /** How far past max_tokens (by our count) a choice may run before the relay cuts it. */
  runaway: RunawayGuard;
  /** Ejects servers after live failures in a row; the relay skips ejected ones. */
  outliers: Pick<OutlierTracker, "isEjected" | "succeeded" | "failed">;
  /** Probes a model's servers back into routing once every one of them is ejected. */
  revival?: Pick<EjectionProber, "ejected">;
  /** Makes the usage event durable (JetStream or billing's RecordUsage), group-committed. */
  usage: Pick<UsagePublisher, "publish">;
  metrics: Pick<RelayMetrics, "upstreamRequests" | "upstreamFirstEvent" | "outputRunaways">;
  log: Logger;
}

/** What the relay tells its client, in order. */
export type RelayEvent =
  /** chat.completion.chunk JSON texts read together, to write together. */
  | { chunks: string[] }
  /** The whole chat.completion JSON of a non-streamed answer (its usage event is durable). */
  | { completion: string }
  /** A failure after the first event: the stream's final event. */
  | { error: AppError }
  /** The answer is whole and its usage event durable: the stream's last bytes may go. */
  | { end: true };

/** How the client side steers the relay. */
export interface RelayControl {
  /** Aborts when the client leaves: the upstream call stops, the answer is `client_cancelled`. */
  clientGone: AbortSignal;
  /**
   * Aborts when the edge must end the answer itself (its shutdown grace is over, or it has been
   * cut off from billing too long): the answer ends with an error event after what was relayed,
   * the signal's reason when that is an AppError, else `service_unavailable` (shutting down).
   */
  cut?: AbortSignal;
  /** False once the client's connection is closed (checked before an answer counts as delivered). */
  clientConnected: () => boolean;
}

const SHUTTING_DOWN = "The server is shutting down; please retry the request.";

/** A chat completion's id is ours: the request id, which also keys its usage. */
const completionId = (requestId: string) => `chatcmpl-${requestId}`;

/**
 * Relays one admitted request from the first upstream that answers, as a stream of RelayEvents the
 * caller writes in its API's format. It reads top to bottom:
 *
 * 1. **Answer** (`answerFrom`): each route's live servers in order, then the client's fallback
 *    routes (`models`, an open model's endpoints), moving on by the one failover rule
 *    (routing/next-endpoint.ts: a server's fault, an open endpoint's plan refusing, and only while
 *    nothing has reached the client); the chunks are rewritten under our id, counted and relayed
 *    as they arrive (backpressure: the upstream is read no faster than the client takes them).
 *    The runaway guard cuts a choice that runs well past max_tokens.
 * 2. **Whole** (`wholeAnswer`): billed tokens (the upstream's report, never above our counts), the
 *    report's verdict, `usage.cost`; the usage event made durable; then the last bytes.
 * 3. **Early end** (`endedEarly`): an error before the first event is thrown (an HTTP error);
 *    after it, a final error event; a client that left ends it quietly. Billed what was relayed;
 *    the relay ends once that usage event is durable too.
 *
 * On every exit path exactly one usage.completed is published.
 */
export async function* relayAnswer(
  deps: RelayDeps,
  request: RelayRequest,
  control: RelayControl,
): AsyncGenerator<RelayEvent, void, undefined> {
  const answer = new Answer(deps, request, control);
  try {
    yield* answerFrom(deps, request, answer);
    yield* wholeAnswer(deps, request, answer);
  } catch (err) {
    const event = endedEarly(answer, err);
    if (event) yield event;
  } finally {
    answer.stopWatching();
    // Every exit waits for its event; a client that stopped reading (the route returned) lands
    // here with nothing recorded yet.
    await answer.record("client_cancelled");
  }
}

/** One request's relay state: the route answering, its accumulator and what reached the client. */
class Answer {
  readonly started = Date.now();
  readonly log: Logger;
  /** Aborts the upstream call: the client left, or the edge cut the answer. */
  readonly upstreamCancel = new AbortController();
  route: Route;
  accumulator: ChunkAccumulator | undefined;
  /** Events the client was given (chunks or the completion). */
  written = 0;
  upstreamStatus = 0;
  #cut = false;
  #recording: Promise<void> | undefined;
  #promptTokens: bigint | undefined;
  readonly #deps: RelayDeps;
  readonly #request: RelayRequest;
  readonly #control: RelayControl;
  /** max_tokens bounds each of the client's `n` choices upstream: the request may use n caps. */
  readonly outputCap: bigint;

  constructor(deps: RelayDeps, request: RelayRequest, control: RelayControl) {
    this.#deps = deps;
    this.#request = request;
    this.#control = control;
    this.route = request.route;
    this.log = deps.log.child({ requestId: request.requestId });
    this.outputCap = request.maxOutputTokens * (request.choices > 1n ? request.choices : 1n);
    if (control.clientGone.aborted) this.#onGone();
    else control.clientGone.addEventListener("abort", this.#onGone, { once: true });
    if (control.cut?.aborted) this.#onCut();
    else control.cut?.addEventListener("abort", this.#onCut, { once: true });
  }

  readonly #onGone = () => this.upstreamCancel.abort();
  readonly #onCut = () => {
    this.#cut = true;
    this.upstreamCancel.abort();
  };

  /**
   * Removes the answer's listeners from the client's and the edge's signals. The edge's is
   * composed (AbortSignal.any) of signals that live as long as the process, and Node keeps a
   * composed signal that has listeners alive as long as its sources: left on, every answer (its
   * accumulator, its chunks) would stay in memory for good.
   */
  stopWatching(): void {
    this.#control.clientGone.removeEventListener("abort", this.#onGone);
    this.#control.cut?.removeEventListener("abort", this.#onCut);
  }

  /** The edge cut the answer (shutdown, isolation) while its client was still there. */
  get cutByEdge(): boolean {
    return this.#cut && !this.#control.clientGone.aborted;
  }

  cutError(): AppError {
    const reason: unknown = this.#control.cut?.reason;
    return reason instanceof AppError ? reason : new AppError("service_unavailable", SHUTTING_DOWN);
  }

  clientConnected(): boolean {
    return !this.#control.clientGone.aborted && this.#control.clientConnected();
  }

  /** A fresh accumulator for the route about to be tried. */
  startOn(route: Route): ChunkAccumulator {
    this.route = route;
    this.accumulator = new ChunkAccumulator(
      completionId(this.#request.requestId),
      route.modelId,
      runawayLimit(this.#request.maxOutputTokens, this.#deps.runaway),
    );
    return this.accumulator;
  }

  /** The prompt's token count, once counting it (beside the answer, when admission did not) is done. */
  async promptTokens(): Promise<bigint> {
    return (this.#promptTokens ??= await this.#request.promptTokens);
  }

  /**
   * What the request is billed. `delivered` is our count of the output relayed: a caller that
   * already counted it passes it, so the tokenizer runs once.
   */
  billed(promptTokens: bigint, delivered = this.accumulator?.deliveredTokens() ?? 0n): BilledUsage {
    return billedUsage({
      reported: this.accumulator?.reportedUsage,
      promptTokens,
      deliveredOutputTokens: delivered,
      maxOutputTokens: this.outputCap,
    });
  }

  /**
   * Publishes the request's one usage event (later calls wait for the same one) and waits until it
   * is durable or USAGE_DURABLE_TIMEOUT_MS has passed. `billed` defaults to what reached the client.
   */
  record(errorCode: string, billed?: BilledUsage, mismatch?: UsageMismatch): Promise<void> {
    this.#recording ??= this.#publish(errorCode, billed, mismatch);
    return this.#recording;
  }

  async #publish(
    errorCode: string,
    billed: BilledUsage | undefined,
    mismatch: UsageMismatch | undefined,
  ): Promise<void> {
    const acc = this.accumulator;
    const charged = billed ?? (this.written > 0 ? this.billed(await this.promptTokens()) : NOTHING_BILLED);
    const finishReason = errorCode === "" ? (acc?.finishReason ?? "") : errorCode === "client_cancelled" ? "" : "error";
    this.#deps.metrics.upstreamRequests.inc({ provider: this.route.provider || "none", code: errorCode || "ok" });
    if (acc?.cutByGuard) this.#reportRunaway(acc);
    await this.#deps.usage.publish(
      usageCompleted(
        this.#request,
        {
          route: this.route,
          inputTokens: charged.inputTokens,
          outputTokens: charged.outputTokens,
          cachedInputTokens: charged.cachedInputTokens,
          reasoningTokens: charged.reasoningTokens,
          errorCode,
          finishReason,
          firstTokenAt: this.written > 0 ? acc?.firstChoiceAt : undefined,
          reported: acc?.reportedUsage,
          mismatch,
          upstreamStatus: this.upstreamStatus,
        },
        this.started,
      ),
    );
  }

  /** The runaway guard cut a choice: the upstream ignored max_tokens. Worth a line and a per-hoster count. */
  #reportRunaway(acc: ChunkAccumulator): void {
    const { provider, hosterId, modelId } = this.route;
    this.#deps.metrics.outputRunaways.inc({ provider, hoster_id: hosterId });
    this.log.warn(
      {
        provider,
        hosterId: hosterId || undefined,
        modelId,
        maxTokens: Number(this.#request.maxOutputTokens),
        choiceLimit: acc.choiceLimit,
      },
      "upstream ran past max_tokens; the runaway guard cut the answer",
    );
  }
}

/**
 * Stage 1: the answer's chunks, from the first server that answers. Failover (same model and
 * price, then the client's fallbacks, each within the admitted worst case) only while nothing has
 * reached the client; a cancelled request stops at once.
 */
async function* answerFrom(deps: RelayDeps, request: RelayRequest, answer: Answer): AsyncGenerator<RelayEvent> {
  const routes = [request.route, ...request.fallbackRoutes];
  const cancelled = answer.upstreamCancel.signal;
  for (const [r, route] of routes.entries()) {
    const lastRoute = r === routes.length - 1;
    // Where the request stands for the one failover rule (routing/next-endpoint.ts): the hook is
    // there only when an open endpoint's plan room moves with the request.
    const at = () => ({
      endpointPlan: request.enterRoute !== undefined && route.open,
      reachedClient: answer.written > 0,
    });
    let targets: UpstreamTarget[];
    try {
      await request.enterRoute?.(route);
      targets = liveCandidates(deps.upstreams, deps.outliers, route);
    } catch (err) {
      if (lastRoute || !movesOn(err, at())) throw err;
      answer.log.info(
        {
          hosterId: route.hosterId || undefined,
          modelId: route.modelId,
          code: err instanceof AppError ? err.code : undefined,
        },
        "endpoint passed over before its first byte (its plan refused, or no live server); trying the next",
      );
      continue;
    }
    for (const [i, target] of targets.entries()) {
      try {
        yield* relayFrom(deps, request, answer, answer.startOn(route), target);
        deps.outliers.succeeded(target.key);
        if (i > 0 || r > 0) answer.log.info({ upstream: target.key, modelId: route.modelId }, "served after failover");
        return;
      } catch (err) {
        if (cancelled.aborted) throw err;
        if (isUpstreamFault(err) && deps.outliers.failed(target.key)) {
          answer.log.warn({ upstream: target.key }, "upstream ejected after failures");
          // Not awaited: the client's answer does not wait for the model's other servers.
          deps.revival
            ?.ejected(route)
            .catch((probeErr: unknown) => answer.log.warn({ err: probeErr }, "probing ejected upstreams failed"));
        }
        if ((lastRoute && i === targets.length - 1) || !movesOn(err, at())) throw err;
        answer.log.warn(
          { upstream: target.key, code: err instanceof UpstreamFailure ? err.code : undefined },
          "upstream failed before the first byte; trying the next",
        );
      }
    }
  }
}

/** One server's answer: its SSE events read, rewritten, counted and relayed as they arrive. */
async function* relayFrom(
  deps: RelayDeps,
  request: RelayRequest,
  answer: Answer,
  acc: ChunkAccumulator,
  target: UpstreamTarget,
): AsyncGenerator<RelayEvent> {
  const body = upstreamBody(request.body, target.upstreamModel, request.maxOutputTokens);
  const events = streamChat(deps.pools, target, body, deps.limits, answer.upstreamCancel.signal, answer.log, {
    onStatus: (status) => (answer.upstreamStatus = status),
  });
  const sent = performance.now();
  let waitingForFirst = true;
  for await (const batch of events) {
    if (waitingForFirst) {
      waitingForFirst = false;
      deps.metrics.upstreamFirstEvent.observe({ provider: answer.route.provider }, (performance.now() - sent) / 1000);
    }
    // The chunks of one read go out as one write. Those taken before a bad one are relayed before
    // its error: they count as delivered (and billed) once the accumulator took them.
    const texts: string[] = [];
    try {
      for (const data of batch) {
        if (!request.stream) acc.accept(data);
        else {
          const text = acc.relayText(data);
          if (text !== undefined) texts.push(text);
        }
        if (acc.stoppedByGuard) break;
      }
    } finally {
      if (texts.length > 0) {
        answer.written += texts.length;
        yield { chunks: texts };
      }
    }
    // Every choice ended, one cut by the guard: the rest of a runaway is not worth reading.
    if (acc.stoppedByGuard) break; // leaving the loop closes the upstream connection (streamChat's finally)
  }
  if (!acc.finished) throw new UpstreamFailure("upstream_error", "upstream stream ended early");
}

/**
 * Stage 2: the answer is whole. Billed tokens and cost, the report's verdict; the usage event is
 * made durable before the last bytes (the completion of a non-streamed answer, the end of a
 * stream), so no client holds an answer whose usage could be lost. A client gone by then is
 * `client_cancelled`, billed what was relayed.
 */
async function* wholeAnswer(deps: RelayDeps, request: RelayRequest, answer: Answer): AsyncGenerator<RelayEvent> {
  const acc = answer.accumulator;
  if (!acc?.finished) throw new UpstreamFailure("upstream_error", "upstream stream ended early");
  // Counting the output is the costly part (the tokenizer over every choice's text): done once.
  const delivered = acc.deliveredTokens();
  const promptTokens = await answer.promptTokens();
  const billed = answer.billed(promptTokens, delivered);
  const mismatch = checkReportedUsage(answer.route, acc, { promptTokens, delivered, outputCap: answer.outputCap });
  const cost = usageCost(request, answer.route, billed);
  if (request.stream && request.includeUsage) {
    yield { chunks: [JSON.stringify(acc.usageChunk(billed, cost))] };
  }
  if (!answer.clientConnected()) throw new UpstreamFailure("client_cancelled", "client left before the answer's end");
  // A non-streamed answer reaches its client in one piece: it counts as given once recorded.
  if (!request.stream) answer.written++;
  await answer.record("", billed, mismatch);
  yield request.stream ? { end: true } : { completion: JSON.stringify(acc.completion(billed, cost)) };
}

/**
 * Stage 3: the answer ended early. Returns the final error event when the client already has a
 * 200 and chunks; throws the error when nothing reached it (an ordinary HTTP error). The usage
 * (billed what was relayed) is published at once; the relay's end waits for it.
 */
function endedEarly(answer: Answer, err: unknown): RelayEvent | undefined {
  const cut = answer.cutByEdge;
  const cancelled =
    !cut &&
    (answer.upstreamCancel.signal.aborted || (err instanceof UpstreamFailure && err.code === "client_cancelled"));
  const appError = cut
    ? answer.cutError()
    : cancelled
      ? undefined
      : upstreamAppError(err, answer.log, "chat completion");
  const errorCode = appError?.code ?? "client_cancelled";
  answer.log.info({ errorCode, written: answer.written }, "chat completion ended early");
  void answer.record(errorCode);
  if (!appError) return undefined;
  if (answer.written > 0) return { error: appError };
  throw appError;
}

/**
 * The verdict on a hoster's usage report: more than the edge relayed or the cap allows
 * (usageMismatch says how an answer the runaway guard cut is judged). Platform servers are the
 * operator's own and are not judged.
 */
function checkReportedUsage(
  route: Route,
  acc: ChunkAccumulator,
  counted: { promptTokens: bigint; delivered: bigint; outputCap: bigint },
): UsageMismatch | undefined {
  if (route.provider !== "hoster") return undefined;
  return usageMismatch({
    reported: acc.reportedUsage,
    promptTokens: counted.promptTokens,
    deliveredOutputTokens: counted.delivered,
    maxOutputTokens: counted.outputCap,
    relayedWhole: !acc.cutByGuard,
  });
}
