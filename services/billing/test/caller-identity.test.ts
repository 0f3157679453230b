import { randomUUID } from "node:crypto";
import { credentials, status, type ChannelCredentials } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import { createCertificateAuthority, issueServiceCertificate } from "@mkt/runtime/service-certificates";
import type { ServiceTls } from "@mkt/runtime/service-tls";
import { testCertificates, type TestCertificates } from "@mkt/testkit/test-certificates";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { startTestBilling, type TestBilling } from "./billing-harness.ts";

// Billing with mTLS on, as every harness runs it, called by hand-built clients: who gets in at
// all, and which RPCs each identity may call (services/billing/src/billing-callers.ts).

let t: TestBilling;
let certs: TestCertificates;
const opened: BillingServiceClient[] = [];

beforeAll(async () => {
  certs = await testCertificates();
  t = await startTestBilling();
});
afterAll(async () => {
  for (const client of opened) client.close();
  await t?.close();
});

/** A billing client presenting `tls` (as the services build theirs), or with raw channel credentials. */
function billing(tls: ServiceTls | ChannelCredentials) {
  const address = `127.0.0.1:${t.billing.port}`;
  const client =
    "cert" in tls ? createClient(BillingServiceClient, address, tls) : new BillingServiceClient(address, tls);
  opened.push(client);
  return promiseClient(client);
}

const topUp = { amountMicros: 1_000_000n, idempotencyKey: "" };
const addCredits = (tls: ServiceTls | ChannelCredentials) =>
  billing(tls).addCredits({ accountId: randomUUID(), ...topUp }, { timeoutMs: 3_000 });

/** The AppError a call rejected with. */
async function rejection(call: Promise<unknown>): Promise<AppError> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, "the call should have been refused").toBeInstanceOf(AppError);
  return err as AppError;
}

/** The call never reached billing: the connection failed (UNAVAILABLE), nothing was answered. */
async function expectNoConnection(call: Promise<unknown>) {
  const err = await rejection(call);
  expect(err.code).toBe("service_unavailable");
  expect((err.cause as { grpcCode: number }).grpcCode).toBe(status.UNAVAILABLE);
}

describe("billing's gRPC port with mTLS on", () => {
  it("lets the edge's certificate call AddCredits", async () => {
    const answer = await addCredits(certs.tls("edge"));
    expect(answer.creditBalanceMicros).toBeGreaterThanOrEqual(1_000_000n);
  });

  it("refuses AddCredits to registry's certificate with PERMISSION_DENIED (forbidden)", async () => {
    const err = await rejection(addCredits(certs.tls("registry")));
    expect(err.code).toBe("forbidden");
    expect(err.httpStatus).toBe(403);
    expect(err.message).toMatch(/registry may not call .*AddCredits/);
  });

  it("refuses admission to registry's certificate: leases are the edge's alone", async () => {
    const err = await rejection(
      billing(certs.tls("registry")).returnLeases({
        edgeId: `edge_${randomUUID()}`,
        sequence: 1n,
        incarnation: 0n,
        bootId: "",
        leases: [],
      }),
    );
    expect(err.code).toBe("forbidden");
    await expect(
      billing(certs.tls("edge")).returnLeases({
        edgeId: `edge_${randomUUID()}`,
        sequence: 1n,
        incarnation: 0n,
        bootId: "",
        leases: [],
      }),
    ).resolves.toBeDefined();
  });

  it("gives a plaintext client nothing", async () => {
    await expectNoConnection(addCredits(credentials.createInsecure()));
  });

  it("gives a TLS client without a certificate nothing: the handshake fails", async () => {
    await expectNoConnection(addCredits(credentials.createSsl(certs.tls("edge").ca)));
  });

  it("refuses a certificate that names the edge but another CA signed", async () => {
    const forged = await issueServiceCertificate(await createCertificateAuthority("someone else's CA"), "edge");
    // It trusts billing's CA, so only billing's side can be the one refusing.
    await expectNoConnection(
      addCredits({ ca: certs.tls("edge").ca, cert: Buffer.from(forged.cert), key: Buffer.from(forged.key) }),
    );
  });

  it("is not reached by a client that trusts another CA (the client checks billing's certificate too)", async () => {
    const otherCa = await createCertificateAuthority("someone else's CA");
    await expectNoConnection(addCredits({ ...certs.tls("edge"), ca: Buffer.from(otherCa.cert) }));
  });

  it("answers /healthz and /readyz on the plain metrics port, without any certificate", async () => {
    const base = `http://127.0.0.1:${t.billing.metricsPort}`;
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.text()).toBe("ready\n");
  });
});
