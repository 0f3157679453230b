import type { Client } from "@grpc/grpc-js";
import { createClient, promiseClient, type PromiseClient } from "@mkt/runtime/grpc-client";
import { AccountsServiceClient } from "@mkt/proto/accounts/v1/accounts";
import { BillingServiceClient, type AuthorizeRequest, type AuthorizeResponse } from "@mkt/proto/billing/v1/billing";
import { RegistryServiceClient } from "@mkt/proto/registry/v1/registry";
import { AuthorizeBatcher } from "./chat/authorize-batcher.ts";
import type { EdgeConfig } from "./config.ts";

/** The edge's gRPC backends: promise clients for unary calls, the raw registry for streaming. */
export interface Backends {
  accounts: PromiseClient<AccountsServiceClient>;
  billing: PromiseClient<BillingServiceClient>;
  /** billing.Authorize for a chat request, sent in batches under load (chat/authorize-batcher.ts). */
  authorize(request: AuthorizeRequest): Promise<AuthorizeResponse>;
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
  const billingCalls = promiseClient(billing);
  const batcher = new AuthorizeBatcher(billingCalls, {
    maxInFlight: config.AUTHORIZE_MAX_IN_FLIGHT,
    maxBatch: config.AUTHORIZE_MAX_BATCH,
  });
  return {
    accounts: promiseClient(accounts),
    billing: billingCalls,
    authorize: (request) => batcher.authorize(request),
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
