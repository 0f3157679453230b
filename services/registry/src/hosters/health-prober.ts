import { SecretBoxError } from "@mkt/runtime/secret-box";
import { hosterKeyContext } from "./hoster.entity.ts";
import type { ProbeTarget } from "./hoster-store.ts";
import type { HostersContext } from "./hosters-context.ts";
import { checkHealth, checkModels, ServerCheckError } from "@mkt/runtime/server-checks";
import { repeatEvery } from "@mkt/runtime/periodic";

/** Probes at most this many hosters at once, so a long list of slow servers cannot pile up sockets. */
const PARALLEL_PROBES = 8;

/**
 * One probe: GET /health, then GET /v1/models with the token listing every registered model.
 * Returns undefined on success, else a generic description for `last_error` (ServerCheckError
 * messages carry no token and no upstream body). Not a chat call: nothing is billed.
 */
async function probe(ctx: HostersContext, target: ProbeTarget): Promise<string | undefined> {
  try {
    const endpoint = new URL(target.endpointUrl);
    const token = ctx.box.open(target.apiKeySealed, hosterKeyContext(target.id));
    await checkHealth(endpoint, ctx.checks);
    await checkModels(endpoint, token, target.modelIds, ctx.checks);
    return undefined;
  } catch (err) {
    if (err instanceof ServerCheckError) return err.message;
    if (err instanceof SecretBoxError) {
      ctx.log.error({ hosterId: target.id, reason: err.message }, "cannot open a hoster's stored token");
      return "The registry cannot read this hoster's stored token.";
    }
    ctx.log.error({ err, hosterId: target.id }, "hoster probe failed unexpectedly");
    return "The health check failed.";
  }
}

/** Probes every registered hoster once and records each result. */
export async function probeAllHosters(ctx: HostersContext, unhealthyAfter: number): Promise<void> {
  const queue = await ctx.store.probeTargets();
  const worker = async () => {
    for (let target = queue.shift(); target; target = queue.shift()) {
      const error = await probe(ctx, target);
      const flipped = await ctx.store.recordProbe(target.id, ctx.clock(), error, unhealthyAfter);
      if (flipped) ctx.announce(target.id);
      if (error) ctx.log.debug({ hosterId: target.id, error }, "hoster probe failed");
    }
  };
  await Promise.all(Array.from({ length: PARALLEL_PROBES }, worker));
}

/**
 * Runs probeAllHosters every `intervalMs` (never overlapping itself) until the returned stop
 * function is called; stop waits for a round in progress. Every replica runs its own loop: one
 * would be enough, and several are harmless, because each result is one idempotent UPDATE on
 * the row's current values (a success sets healthy; failures count up to `unhealthyAfter`), so
 * extra probes only make a status change arrive sooner.
 */
export function startHealthProber(
  ctx: HostersContext,
  options: { intervalMs: number; unhealthyAfter: number },
): () => Promise<void> {
  return repeatEvery(
    options.intervalMs,
    () => probeAllHosters(ctx, options.unhealthyAfter),
    ctx.log,
    "hoster probe round",
  );
}
