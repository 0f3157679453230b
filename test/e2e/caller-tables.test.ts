import { credentials } from "@grpc/grpc-js";
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import type { ServiceTls } from "@mkt/runtime/service-tls";
import { testCertificates, type TestCertificates } from "@mkt/testkit/test-certificates";
import {
  AccountsServiceClient,
  CheckInviteRequest,
  CreateAccountRequest,
  GetAccountsRequest,
} from "@mkt/proto/accounts/v1/accounts";
import {
  GetProductRequest,
  RegisterHosterRequest,
  RegistryServiceClient,
  type WatchCatalogResponse,
} from "@mkt/proto/registry/v1/registry";
import { startSystem, type RunningSystem } from "./system.ts";

// The caller tables of accounts and registry (services/*/src/*-callers.ts), enforced on their
// gRPC ports with mTLS as deployed: an identity may call only the RPCs its table lists, and a
// client without a certificate gets nothing. (Billing's: services/billing/test/caller-identity.)

let system: RunningSystem;
let certs: TestCertificates;
const opened: Array<{ close(): void }> = [];

beforeAll(async () => {
  system = await startSystem();
  certs = await testCertificates();
});
afterAll(async () => {
  for (const client of opened) client.close();
  await system?.close();
});

type Tls = ServiceTls | ReturnType<typeof credentials.createInsecure>;
function accounts(tls: Tls) {
  const address = system.grpcAddresses.accounts;
  const client =
    "cert" in tls ? createClient(AccountsServiceClient, address, tls) : new AccountsServiceClient(address, tls);
  opened.push(client);
  return promiseClient(client);
}
function registry(tls: ServiceTls) {
  const client = createClient(RegistryServiceClient, system.grpcAddresses.registry, tls);
  opened.push(client);
  return promiseClient(client);
}

/** The first message of a WatchCatalog stream, or the error that ended it. */
function firstTable(tls: ServiceTls): Promise<WatchCatalogResponse | AppError> {
  const client = createClient(RegistryServiceClient, system.grpcAddresses.registry, tls);
  opened.push(client);
  const call = client.watchCatalog({});
  return new Promise((resolve) => {
    call.on("data", (response: WatchCatalogResponse) => {
      resolve(response);
      call.cancel();
    });
    call.on("error", (err) => resolve(AppError.fromGrpc(err)));
  });
}

/** The error a call was answered with, or undefined when it succeeded. */
async function outcome(call: Promise<unknown>): Promise<AppError | undefined> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (err !== undefined) expect(err).toBeInstanceOf(AppError);
  return err as AppError | undefined;
}

const options = { timeoutMs: 5_000 };
const signUp = () =>
  CreateAccountRequest.fromPartial({ email: `caller-${randomUUID()}@example.com`, password: "long enough password" });

describe("accounts' callers", () => {
  it("lets only the edge create an account", async () => {
    expect(await outcome(accounts(certs.tls("edge")).createAccount(signUp(), options))).toBeUndefined();
    for (const caller of ["registry", "billing"] as const) {
      const err = await outcome(accounts(certs.tls(caller)).createAccount(signUp(), options));
      expect(err?.code, caller).toBe("forbidden");
      expect(err?.message).toMatch(new RegExp(`${caller} may not call .*CreateAccount`));
    }
  });

  it("lets billing read accounts and registry check invites, and not the other way round", async () => {
    const read = GetAccountsRequest.fromPartial({ accountIds: [randomUUID()] });
    expect((await outcome(accounts(certs.tls("billing")).getAccounts(read, options)))?.code).not.toBe("forbidden");
    expect((await outcome(accounts(certs.tls("registry")).getAccounts(read, options)))?.code).toBe("forbidden");
    const invite = CheckInviteRequest.fromPartial({ inviteCode: "inv_nope", clientIp: "127.0.0.1" });
    expect((await outcome(accounts(certs.tls("registry")).checkInvite(invite, options)))?.code).not.toBe("forbidden");
    expect((await outcome(accounts(certs.tls("billing")).checkInvite(invite, options)))?.code).toBe("forbidden");
  });

  it("gives a plaintext client nothing", async () => {
    const err = await outcome(accounts(credentials.createInsecure()).createAccount(signUp(), options));
    expect(err?.code).toBe("service_unavailable");
  });
});

describe("registry's callers", () => {
  it("lets only billing read a product by id, and only the edge register a hoster", async () => {
    const product = GetProductRequest.fromPartial({ productId: randomUUID() });
    expect((await outcome(registry(certs.tls("billing")).getProduct(product, options)))?.code).not.toBe("forbidden");
    for (const caller of ["edge", "accounts"] as const) {
      expect((await outcome(registry(certs.tls(caller)).getProduct(product, options)))?.code, caller).toBe("forbidden");
    }
    const hoster = RegisterHosterRequest.fromPartial({ name: "H", email: "h@example.com" });
    expect((await outcome(registry(certs.tls("billing")).registerHoster(hoster, options)))?.code).toBe("forbidden");
    expect((await outcome(registry(certs.tls("edge")).registerHoster(hoster, options)))?.code).not.toBe("forbidden");
  });

  it("streams the routing table, which carries upstream tokens, to the edge only", async () => {
    const table = await firstTable(certs.tls("edge"));
    expect(table).not.toBeInstanceOf(AppError);
    expect((table as WatchCatalogResponse).table?.platformModels.length).toBeGreaterThan(0);
    for (const caller of ["billing", "accounts", "registry"] as const) {
      const refused = await firstTable(certs.tls(caller));
      expect(refused, caller).toBeInstanceOf(AppError);
      expect((refused as AppError).code).toBe("forbidden");
      expect((refused as AppError).message).toMatch(new RegExp(`${caller} may not call .*WatchCatalog`));
    }
  });
});
