import { SecretBoxError } from "@mkt/runtime/secret-box";
import { repeatEvery } from "@mkt/runtime/periodic";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { hosterKeyContext } from "../hosters/hoster.entity.ts";
import { minutesOf } from "../hosters/endpoint-figures.ts";
import type { HostersContext } from "../hosters/hosters-context.ts";
import type { VerifyTarget } from "./verification-store.ts";
import type { ProbeCall } from "./probe-call.ts";
import { verifyEndpoint } from "./verify-endpoint.ts";

/** Endpoints verified at once: a round's calls stay few however many hosters there are. */
const PARALLEL_RUNS = 2;

/**
 * A probe's counted call as a usage event of its endpoint, so that probes count toward its live
 * figures (uptime, latency) as the answers customers get do. It is never published: no one is
 * billed, and no subscriber's usage holds it.
 */
function asUsage(target: VerifyTarget, call: ProbeCall, at: Date): UsageCompleted {
  return UsageCompleted.fromPartial({
    provider: "hoster",
    hosterId: target.hosterId,
    modelId: target.modelId,
    success: call.failure === undefined,
    errorCode: call.failure === undefined ? "" : call.status === 0 ? "upstream_timeout" : "upstream_error",
    upstreamStatus: call.status,
    latencyMs: BigInt(Math.round(call.latencyMs)),
    startedAt: at.toISOString(),
  });
}

/**
 * The hosters with an active open plan that prices cached input below its input price: their
 * models' runs check that a repeated prompt reports cached tokens. One plan is enough, as every
 * plan of a hoster sells the same server.
 */
async function hostersWithCacheDiscount(ctx: HostersContext): Promise<Set<string>> {
  const plans = await ctx.products.activeByHoster();
  const discounted = [...plans].filter(([, list]) =>
    list.some(
      ({ terms }) =>
        terms.open &&
        terms.cachedInputPricePer1mMicros !== undefined &&
        terms.cachedInputPricePer1mMicros < terms.inputPricePer1mMicros,
    ),
  );
  return new Set(discounted.map(([hosterId]) => hosterId));
}

/** Verifies one endpoint and records its run; a token registry cannot open fails nothing (logged). */
async function verifyOne(ctx: HostersContext, target: VerifyTarget, cacheDiscount: boolean): Promise<void> {
  let token: string;
  try {
    token = ctx.box.open(target.apiKeySealed, hosterKeyContext(target.hosterId));
  } catch (err) {
    if (!(err instanceof SecretBoxError)) throw err;
    ctx.log.error({ hosterId: target.hosterId, reason: err.message }, "cannot open a hoster's stored token");
    return;
  }
  const at = ctx.clock();
  const run = await verifyEndpoint(new URL(target.endpointUrl), token, target.modelId, ctx.checks, { cacheDiscount });
  const status = await ctx.verification.record(target, at, run.passed, run.checks);
  await ctx.minutes.add(minutesOf([asUsage(target, run.main, at)], at));
  const failed = run.checks.filter((c) => !c.passed).map((c) => c.check);
  ctx.log.info(
    { hosterId: target.hosterId, modelId: target.modelId, passed: run.passed, failed, status },
    "verification run",
  );
}

/**
 * One verification round over every open endpoint. The routing table is rebuilt after it: a
 * verdict decides whether an endpoint is a fallback only, and so do the figures its probes add.
 */
export async function verifyAllEndpoints(ctx: HostersContext): Promise<void> {
  const [queue, discounted] = await Promise.all([ctx.verification.targets(), hostersWithCacheDiscount(ctx)]);
  const worker = async () => {
    for (let target = queue.shift(); target; target = queue.shift()) {
      await verifyOne(ctx, target, discounted.has(target.hosterId));
    }
  };
  await Promise.all(Array.from({ length: PARALLEL_RUNS }, worker));
  ctx.announce("");
}

/**
 * Runs a verification round every VERIFY_INTERVAL_MS (never overlapping itself), the loop started
 * up to a tenth of the interval late at random, so that replicas started together do not probe
 * every hoster at the same instant. Each replica runs its own loop: a verdict is one update on the
 * row's current values, so a second replica's runs only come sooner. Stop waits for a round in
 * progress.
 */
export function startVerifier(ctx: HostersContext, intervalMs: number): () => Promise<void> {
  let stop: (() => Promise<void>) | undefined;
  const start = setTimeout(
    () => (stop = repeatEvery(intervalMs, () => verifyAllEndpoints(ctx), ctx.log, "verification round")),
    Math.random() * (intervalMs / 10),
  );
  start.unref();
  return async () => {
    clearTimeout(start);
    await stop?.();
  };
}
