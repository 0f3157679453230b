import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import { startGrpcServer } from "@mkt/runtime/grpc-server";
import type { Logger } from "@mkt/runtime/logger";
import { connectNats, ensureUsageStream, eventNames } from "@mkt/runtime/nats";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { RegistryServiceService } from "@mkt/proto/registry/v1/registry";
import { localCatalog } from "./catalog/local-catalog.ts";
import type { ChatDeps, SlotReleaser } from "./chat/chat-completion.ts";
import { UsagePublisher } from "./chat/usage-publisher.ts";
import type { RegistryConfig } from "./config.ts";
import { registryService } from "./registry-service.ts";
import { UpstreamPools } from "./upstream/upstream-pools.ts";

export interface RegistryHandle {
  port: number;
  /** Stop accepting → let running streams finish (grace) → close upstream pools → nats.drain(). */
  close(graceMs?: number): Promise<void>;
}

/** Opens registry's dependencies and starts its gRPC server. */
export async function startRegistry(config: RegistryConfig, log: Logger): Promise<RegistryHandle> {
  const nc = await connectNats(config.NATS_URL, "registry", log);
  const names = eventNames(config.EVENTS_PREFIX);
  const billingClient = createClient(BillingServiceClient, config.BILLING_ADDR);
  const pools = new UpstreamPools(config.UPSTREAM_CONNECT_TIMEOUT_MS);
  const deps: ChatDeps = {
    catalog: localCatalog(
      config.LOCAL_MODELS,
      { url: config.LOCAL_MODEL_URL, token: config.LOCAL_MODEL_TOKEN },
      new Date(),
    ),
    pools,
    timeouts: {
      firstByteMs: config.UPSTREAM_FIRST_BYTE_TIMEOUT_MS,
      idleMs: config.UPSTREAM_IDLE_TIMEOUT_MS,
      totalMs: config.UPSTREAM_TOTAL_TIMEOUT_MS,
    },
    billing: promiseClient(billingClient) as unknown as SlotReleaser,
    inflight: new Set(),
    usage: new UsagePublisher(nc, names.usageCompleted, log),
    log,
  };
  const cleanup = async () => {
    billingClient.close();
    await pools.close();
    await nc.drain();
  };
  try {
    await ensureUsageStream(nc, names);
  } catch (err) {
    await cleanup();
    throw err;
  }
  const grpc = await startGrpcServer(config.GRPC_HOST, config.GRPC_PORT, [
    [RegistryServiceService, registryService(deps, log)],
  ]).catch(async (err: unknown) => {
    await cleanup();
    throw err;
  });
  log.info({ port: grpc.port, models: config.LOCAL_MODELS.map((m) => m.modelId) }, "registry listening");

  let closing: Promise<void> | undefined;
  return {
    port: grpc.port,
    close(graceMs = 10_000) {
      closing ??= (async () => {
        await grpc.close(graceMs);
        // Streams still running after the grace period are cut here; each handler then releases
        // its slot and publishes its usage event, which must happen before NATS drains.
        await pools.close();
        await Promise.allSettled([...deps.inflight]);
        billingClient.close();
        await nc.drain();
      })();
      return closing;
    },
  };
}
