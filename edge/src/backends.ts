import type { Client } from "@grpc/grpc-js";
import { createClient, promiseClient, type PromiseClient } from "@mkt/runtime/grpc-client";
import { AccountsServiceClient } from "@mkt/proto/accounts/v1/accounts";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { RegistryServiceClient } from "@mkt/proto/registry/v1/registry";
import type { EdgeConfig } from "./config.ts";

/** The edge's gRPC backends: promise clients for unary calls, the raw registry for streaming. */
export interface Backends {
  accounts: PromiseClient<AccountsServiceClient>;
  billing: PromiseClient<BillingServiceClient>;
  registry: PromiseClient<RegistryServiceClient>;
  /** ChatCompletion is server-streaming, so it is called on the generated client directly. */
  registryStream: RegistryServiceClient;
  /** The same for billing's ExportUsage stream. */
  billingStream: BillingServiceClient;
  /** Names the backends whose channel is not connected within `timeoutMs` (empty: all ready). */
  unready(timeoutMs: number): Promise<string[]>;
  close(): void;
}

export function connectBackends(config: EdgeConfig): Backends {
  const accounts = createClient(AccountsServiceClient, config.ACCOUNTS_ADDR);
  const billing = createClient(BillingServiceClient, config.BILLING_ADDR);
  const registry = createClient(RegistryServiceClient, config.REGISTRY_ADDR);
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
