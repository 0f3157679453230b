import type { Client } from "@grpc/grpc-js";
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
  /** WatchCatalog is a streaming call, so it is made on the generated client directly. */
  registryStream: RegistryServiceClient;
  /** The same for billing's ExportUsage stream. */
  billingStream: BillingServiceClient;
  /**
   * Names the backends a request needs whose channel is not connected within `timeoutMs` (empty:
   * all ready). Registry is not among them: chats route from the edge's last routing table while
   * it is down, so an edge that cannot reach it still serves (its portal and hoster pages fail).
   */
  unready(timeoutMs: number): Promise<string[]>;
  close(): void;
}

export function connectBackends(config: EdgeConfig): Backends {
  // The edge's certificate: every service checks it against the RPC's caller table.
  const tls = readServiceTls(config);
  const accounts = createClient(AccountsServiceClient, config.ACCOUNTS_ADDR, tls);
  const billing = createClient(BillingServiceClient, config.BILLING_ADDR, tls);
  const registry = createClient(RegistryServiceClient, config.REGISTRY_ADDR, tls);
  const needed: Array<[string, Client]> = [
    ["accounts", accounts],
    ["billing", billing],
  ];
  return {
    accounts: promiseClient(accounts),
    billing: promiseClient(billing),
    registry: promiseClient(registry),
    registryStream: registry,
    billingStream: billing,
    unready: async (timeoutMs) => {
      const ready = await Promise.all(
        needed.map(
          ([, client]) =>
            new Promise<boolean>((resolve) => client.waitForReady(Date.now() + timeoutMs, (err) => resolve(!err))),
        ),
      );
      return needed.filter((_, i) => !ready[i]).map(([name]) => name);
    },
    close: () => [accounts, billing, registry].forEach((client) => client.close()),
  };
}
