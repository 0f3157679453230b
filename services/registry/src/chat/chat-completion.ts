import type { ServerWritableStream } from "@grpc/grpc-js";
import { AppError } from "@mkt/runtime/errors";
import type { PromiseClient } from "@mkt/runtime/grpc-client";
import type { Logger } from "@mkt/runtime/logger";
import { ReleaseSlotRequest, type BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { ChatCompletionResponse, type ChatCompletionRequest, type Route } from "@mkt/proto/registry/v1/registry";
import type { ModelCatalog, UpstreamTarget } from "../catalog/model-catalog.ts";
import type { UsageMismatchRecorder } from "../hosters/usage-mismatch-recorder.ts";
import type { RegistryMetrics } from "../metrics/registry-metrics.ts";
import { streamChat, UpstreamFailure, type UpstreamLimits } from "../upstream/stream-chat.ts";
import type { OutlierTracker } from "../upstream/outlier-tracker.ts";
import type { UpstreamPools } from "../upstream/upstream-pools.ts";
import { billedUsage, type BilledUsage } from "./billed-usage.ts";
import { ChunkAccumulator } from "./chunk-accumulator.ts";
import { upstreamBody } from "./request-body.ts";
import { isUpstreamFault, liveCandidates } from "./upstream-failover.ts";
import { usageMismatch } from "./usage-check.ts";
import type { UsagePublisher } from "./usage-publisher.ts";

/** The one billing call registry makes (a narrow view of the billing client, easy to fake). */
export type SlotReleaser = Pick<PromiseClient<BillingServiceClient>, "releaseSlot">;

export interface ChatDeps {
  catalog: ModelCatalog;
  pools: UpstreamPools;
  limits: UpstreamLimits;
  billing: SlotReleaser;
  /** Handlers still running (so shutdown can wait for their usage events). */
  inflight: Set<Promise<void>>;
  /**
   * Aborted when the shutdown grace is over: streams still running stop reading their upstream and
   * end with a final `service_unavailable` event, written after every chunk they relayed.
   */
  shutdown?: AbortSignal;
  /** Ejects servers after live failures in a row; the relay skips ejected ones. */
  outliers: Pick<OutlierTracker, "isEjected" | "succeeded" | "failed">;
  usage: UsagePublisher;
  /** Flags hosters whose usage reports disagree with the registry's count. */
  mismatches: Pick<UsageMismatchRecorder, "record">;
  metrics: Pick<RegistryMetrics, "upstreamRequests" | "upstreamFirstEvent">;
  log: Logger;
}

type Call = ServerWritableStream<ChatCompletionRequest, ChatCompletionResponse>;

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

const SHUTTING_DOWN = "The server is shutting down; please retry the request.";

/**
 * ChatCompletion: relays one request to the route's upstream. A server that fails before anything
 * reached the caller hands the request to the route's next server (same model and price; ejected
 * servers are skipped, none left is no_healthy_upstream). Failures before the first event are
 * gRPC errors; after it, a final `error` event and no retry. Output past the granted cap is never relayed:
 * the answer ends there with finish_reason `length` and the upstream call is closed. On every exit
 * path the reservation's slot is released and exactly one usage.completed event is published,
 * before the call ends.
 */
export function chatCompletion(deps: ChatDeps): (call: Call) => Promise<void> {
  return async (call) => {
    const work = relay(deps, call);
    deps.inflight.add(work);
    try {
      await work;
    } finally {
      deps.inflight.delete(work);
    }
  };
}

async function relay(deps: ChatDeps, call: Call): Promise<void> {
  const request = call.request;
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

  const route = request.route;
  let accumulator: ChunkAccumulator | undefined;
  let written = 0;
  let billed: BilledUsage;
  let errorCode = "";
  let failure: AppError | undefined;
  const bill = () =>
    billedUsage({
      reported: accumulator?.reportedUsage,
      promptTokens: request.promptTokens,
      deliveredOutputTokens: accumulator?.deliveredTokens() ?? 0n,
      // Each of the client's `n` choices may use the whole cap.
      maxOutputTokens: request.maxOutputTokens * (request.choices > 1n ? request.choices : 1n),
    });

  try {
    if (!route) throw new AppError("invalid_request", "A route is required.");
    const targets = await liveCandidates(deps.catalog, deps.outliers, route);
    // max_tokens bounds each of the n choices upstream, so the relay allows n caps in all.
    const choices = request.choices > 1n ? request.choices : 1n;
    const relayFrom = async (target: UpstreamTarget, acc: ChunkAccumulator) => {
      const body = upstreamBody(request.body, target.upstreamModel, request.maxOutputTokens);
      const events = streamChat(deps.pools, target, body, deps.limits, cancel.signal, log);
      const sent = performance.now();
      let waitingForFirst = true;
      for await (const batch of events) {
        if (waitingForFirst) {
          waitingForFirst = false;
          deps.metrics.upstreamFirstEvent.observe({ provider: route.provider }, (performance.now() - sent) / 1000);
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
            if (acc.atLimit) break;
          }
        } finally {
          if (texts.length > 0) {
            const event = texts.length === 1 ? { chunk: texts[0] } : { chunks: { chunks: texts } };
            await send(call, ChatCompletionResponse.fromPartial(event), cancel.signal);
            written += texts.length;
          }
        }
        if (acc.atLimit) {
          log.info({ limit: acc.outputLimit }, "upstream output reached the granted cap; closing it");
          for (const closing of acc.closeAtLimit()) {
            if (!request.stream) continue;
            await send(call, ChatCompletionResponse.fromPartial({ chunk: json(closing) }), cancel.signal);
            written++;
          }
          break; // leaving the loop closes the upstream connection (streamChat's finally)
        }
      }
      if (!acc.finished) throw new UpstreamFailure("upstream_error", "upstream stream ended early");
    };
    // Failover: the next server (same model, same price) only while nothing reached the caller.
    for (const [i, target] of targets.entries()) {
      accumulator = new ChunkAccumulator(route.modelId, Number(request.maxOutputTokens * choices));
      try {
        await relayFrom(target, accumulator);
        deps.outliers.succeeded(target.key);
        if (i > 0) log.info({ upstream: target.key }, "served by a later upstream after failover");
        break;
      } catch (err) {
        if (cancel.signal.aborted || !isUpstreamFault(err)) throw err;
        if (deps.outliers.failed(target.key)) log.warn({ upstream: target.key }, "upstream ejected after failures");
        if (written > 0 || i === targets.length - 1) throw err;
        log.warn({ upstream: target.key, code: err.code }, "upstream failed before the first byte; trying the next");
      }
    }
    if (!accumulator?.finished) throw new UpstreamFailure("upstream_error", "upstream stream ended early");
    billed = bill();
    checkReportedUsage(deps, request, route, accumulator);
    if (request.stream) {
      if (request.includeUsage) {
        await send(
          call,
          ChatCompletionResponse.fromPartial({ chunk: json(accumulator.usageChunk(billed)) }),
          cancel.signal,
        );
      }
    } else {
      await send(
        call,
        ChatCompletionResponse.fromPartial({ completion: json(accumulator.completion(billed)) }),
        cancel.signal,
      );
      written++;
    }
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
  await finish(deps, request, route, billed, errorCode, handlerStart, log);
  if (failure) throw failure;
}

/**
 * Flags a hoster whose usage report disagrees with what the registry relayed (DESIGN.md §5). Only
 * for an answer relayed whole: one cut at the cap had more generated than relayed.
 */
function checkReportedUsage(deps: ChatDeps, request: ChatCompletionRequest, route: Route, acc: ChunkAccumulator) {
  if (route.provider !== "hoster" || acc.atLimit) return;
  const mismatch = usageMismatch({
    reported: acc.reportedUsage,
    promptTokens: request.promptTokens,
    deliveredOutputTokens: acc.deliveredTokens(),
  });
  if (mismatch) deps.mismatches.record(route.hosterId, mismatch);
}

/** Frees the concurrency slot, then records the outcome; neither failure reaches the caller. */
async function finish(
  deps: ChatDeps,
  request: ChatCompletionRequest,
  route: Route | undefined,
  billed: BilledUsage,
  errorCode: string,
  handlerStart: number,
  log: Logger,
): Promise<void> {
  deps.metrics.upstreamRequests.inc({ provider: route?.provider || "none", code: errorCode || "ok" });
  // Only a subscription's reservation holds a slot (the edge passes Authorize's holds_slot); the
  // others skip the round trip. Settlement frees a slot too, so a lost call only delays it.
  if (request.releaseSlot) {
    try {
      await deps.billing.releaseSlot(ReleaseSlotRequest.fromPartial({ reservationId: request.reservationId }), {
        timeoutMs: 2_000,
      });
    } catch (err) {
      log.warn({ err, reservationId: request.reservationId }, "ReleaseSlot failed; the slot frees on settlement");
    }
  }
  // The edge's receipt time; a missing or absurd one falls back to when this call started.
  const edgeMs = Number(request.receivedAtMs);
  const receivedAt = edgeMs > 0 && edgeMs <= Date.now() + 60_000 ? edgeMs : handlerStart;
  await deps.usage.publish(
    UsageCompleted.fromPartial({
      requestId: request.requestId,
      reservationId: request.reservationId,
      accountId: request.accountId,
      keyId: request.keyId,
      modelId: route?.modelId ?? "",
      provider: route?.provider ?? "",
      hosterId: route?.hosterId ?? "",
      inputTokens: billed.inputTokens,
      outputTokens: billed.outputTokens,
      latencyMs: BigInt(Math.max(0, Date.now() - receivedAt)),
      success: errorCode === "",
      errorCode,
      startedAt: new Date(receivedAt).toISOString(),
    }),
  );
}
