import { randomUUID } from "node:crypto";
import { createLogger } from "@mkt/runtime/logger";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { startBilling } from "../../services/billing/src/server.ts";
import { startTestBilling, type TestBilling } from "../../services/billing/test/billing-harness.ts";
import type { LeaseBilling } from "../../edge/src/leases/lease-table.ts";

/** The lease settings every run uses: short, so that lapses, isolation and releases happen often. */
export const TTL_MS = 1_000;
export const ISOLATION_MS = 5_000;
export const MAX_REQUEST_MS = 60_000;
export const LIMIT_PER_MINUTE = 20;
export const STARTING_MICROS = 10_000n;

/**
 * One real billing (gRPC server, settlement consumer, its own PostgreSQL database) shared by the
 * runs of one process, whose clock the current run drives: each run starts an hour after the
 * last one's end, with accounts and edge ids of its own, so runs never see each other's rows.
 */
export class SimBilling {
  readonly t: TestBilling;
  readonly nc: NatsConnection;
  readonly edges: LeaseBilling;
  readonly #closeClient: () => void;
  /** Billing's wall clock in ms (the current run moves it). */
  clockMs = Date.UTC(2031, 0, 6, 12, 0, 10);

  private constructor(t: TestBilling, nc: NatsConnection, client: { close(): void }) {
    this.t = t;
    this.nc = nc;
    this.#closeClient = () => client.close();
    this.edges = promiseClient(client as never) as LeaseBilling;
  }

  static async start(): Promise<SimBilling> {
    const started: { sim?: SimBilling } = {};
    const clock = () => new Date(started.sim?.clockMs ?? 0);
    const t = await startTestBilling(
      {
        LEASE_TTL_MS: String(TTL_MS),
        EDGE_ISOLATION_MS: String(ISOLATION_MS),
        MAX_REQUEST_MS: String(MAX_REQUEST_MS),
        STARTING_CREDIT_USD: String(Number(STARTING_MICROS) / 1e6),
        // The subscriber's account has room enough that only its plan (slots) limits it.
        TIERS: JSON.stringify({
          free: { limit_per_minute: LIMIT_PER_MINUTE, limit_per_day: 100_000 },
          subscriber: { limit_per_minute: 100_000, limit_per_day: 10_000_000 },
        }),
      },
      { clock },
    );
    const certs = await testCertificates();
    const client = createClient(BillingServiceClient, `127.0.0.1:${t.billing.port}`, certs.tls("edge"));
    const nc = await connect({ servers: TEST_NATS_URL });
    started.sim = new SimBilling(t, nc, client);
    return started.sim;
  }

  /** Billing killed and started again on the same port and database (the edges' client reconnects). */
  async restart(): Promise<void> {
    const port = this.t.billing.port;
    await this.t.billing.close();
    this.t.billing = await startBilling({ ...this.t.config, GRPC_PORT: port }, createLogger("sim-billing", "silent"), {
      clock: () => new Date(this.clockMs),
      counterPruneIntervalMs: 3_600_000,
      janitorIntervalMs: 3_600_000,
      renewalIntervalMs: 3_600_000,
      leaseCloserIntervalMs: 3_600_000,
    });
    // The harness's client (top-ups, pauses) reconnects within its backoff.
    for (let tries = 0; ; tries++) {
      try {
        await this.t.client.getBalance({ accountId: randomUUID() });
        return;
      } catch (err) {
        if (tries > 100) throw err;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  }

  async close(): Promise<void> {
    this.#closeClient();
    await this.nc.drain();
    await this.t.close();
  }
}
