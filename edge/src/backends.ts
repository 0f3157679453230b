import type { ChannelOptions, Client } from "@grpc/grpc-js";
import { createClient, promiseClient, type PromiseClient } from "@mkt/runtime/grpc-client";
import { readServiceTls } from "@mkt/runtime/service-tls";
import { AccountsServiceClient } from "@mkt/proto/accounts/v1/accounts";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { RegistryServiceClient } from "@mkt/proto/registry/v1/registry";
import type { EdgeConfig } from "./config.ts";

/** The edge's gRPC backends: promise clients for unary calls, the raw registry for streaming. */
export interface Backends {
  accounts: PromiseClient<AccountsServiceClient>;
  billing: PromiseClient<BillingServiceClient>;
  registry: PromiseClient<RegistryServiceClient>;
  /** ChatCompletion and WatchCatalog are streaming calls, so they are made on the generated client directly. */
  registryStream: RegistryServiceClient;
  /** The same for billing's ExportUsage stream. */
  billingStream: BillingServiceClient;
  /** Names the backends whose channel is not connected within `timeoutMs` (empty: all ready). */
  unready(timeoutMs: number): Promise<string[]>;
  close(): void;
}

/**
 * The registry channel's HTTP/2 flow-control window (grpc-js sets the connection's and each
 * call's to it). Every relayed answer shares one connection, and with HTTP/2's default 64 KiB the
 * registry could have only 64 KiB of all the answers in flight at a time, each further 64 KiB
 * waiting for the edge's WINDOW_UPDATE, a round trip through two busy event loops under load:
 * with 1,000 streams the first chunks reached clients at p50 7.5 s although the registry had
 * them within 2 s. With 4 MiB: p50 1.8–2.4 s (1 and 16 MiB alike, 256 KiB 5.9 s; bench/README.md).
 * The window does not bound what the edge holds for a client that reads slowly: grpc-js reads a
 * call whether or not it is consumed, so that is bounded by the answer (its output cap).
 */
export const RELAY_CHANNEL_OPTIONS: ChannelOptions = { "grpc-node.flow_control_window": 4 << 20 };

export function connectBackends(config: EdgeConfig): Backends {
  // The edge's certificate: every service checks it against the RPC's caller table.
  const tls = readServiceTls(config);
  const accounts = createClient(AccountsServiceClient, config.ACCOUNTS_ADDR, tls);
  const billing = createClient(BillingServiceClient, config.BILLING_ADDR, tls);
  const registry = createClient(RegistryServiceClient, config.REGISTRY_ADDR, tls, RELAY_CHANNEL_OPTIONS);
  const all: Array<[string, Client]> = [
    ["accounts", accounts],
    ["billing", billing],
    ["registry", registry],
  ];
  return {
    accounts: promiseClient(accounts),
    billing: promiseClient(billing),
    registry: promiseClient(registry),
    registryStream: registry,
    billingStream: billing,
    unready: async (timeoutMs) => {
      const ready = await Promise.all(
        all.map(
          ([, client]) =>
            new Promise<boolean>((resolve) => client.waitForReady(Date.now() + timeoutMs, (err) => resolve(!err))),
        ),
      );
      return all.filter((_, i) => !ready[i]).map(([name]) => name);
    },
    close: () => all.forEach(([, client]) => client.close()),
  };
}
