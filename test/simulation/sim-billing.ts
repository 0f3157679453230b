import { randomUUID } from "node:crypto";
import { createLogger } from "@mkt/runtime/logger";
import { createClient, promiseClient, type PromiseClient } from "@mkt/runtime/grpc-client";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { startBilling } from "../../services/billing/src/server.ts";
import { startTestBilling, type TestBilling } from "../../services/billing/test/billing-harness.ts";
import type { LeaseBilling } from "../../edge/src/leases/lease-table.ts";

/**
 * The lease settings billing owns and sends in every lease reply (docs/adr/0044): each run starts
 * billing with these, short so that lapses, isolation and releases happen often; a
 * `billingRestart` step may restart it with others (SETTINGS_CHOICES). MAX_REQUEST_MS stays.
 */
export interface LeaseSettingsMs {
  ttlMs: number;
  isolationMs: number;
}
export const START_SETTINGS: LeaseSettingsMs = { ttlMs: 1_000, isolationMs: 5_000 };
/** What a restart picks from: billing's rule (config.ts) keeps EDGE_ISOLATION_MS above LEASE_TTL_MS. */
export const TTL_CHOICES = [1_000, 2_000, 4_000] as const;
export const ISOLATION_CHOICES = [2_500, 5_000, 10_000] as const;
/** The shortest TTL billing may run with: the clock steps stay within half of it whatever it runs with now. */
export const MIN_TTL_MS = Math.min(...TTL_CHOICES);
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
  /** The edges' channel to billing, for a call that is no lease call (a balance read). */
  readonly #edgesChannel: Pick<PromiseClient<BillingServiceClient>, "getBalance">;
  readonly #closeClient: () => void;
  /** Billing's wall clock in ms (the current run moves it). */
  clockMs = Date.UTC(2031, 0, 6, 12, 0, 10);
  /** The lease settings billing runs with now (the edges learn them from its replies). */
  settings: LeaseSettingsMs = START_SETTINGS;

  private constructor(t: TestBilling, nc: NatsConnection, client: { close(): void }) {
    this.t = t;
    this.nc = nc;
    this.#closeClient = () => client.close();
    this.#edgesChannel = promiseClient(client as never) as PromiseClient<BillingServiceClient>;
    this.edges = this.#edgesChannel as unknown as LeaseBilling;
  }

  static async start(): Promise<SimBilling> {
    const started: { sim?: SimBilling } = {};
    const clock = () => new Date(started.sim?.clockMs ?? 0);
    const t = await startTestBilling(
      {
        LEASE_TTL_MS: String(START_SETTINGS.ttlMs),
        EDGE_ISOLATION_MS: String(START_SETTINGS.isolationMs),
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

  /**
   * Billing killed and started again on the same port and database (the edges' client
   * reconnects), with `settings` (its current ones by default): an operator's new LEASE_TTL_MS or
   * EDGE_ISOLATION_MS takes effect this way.
   */
  async restart(settings: LeaseSettingsMs = this.settings): Promise<void> {
    // Billing refuses to start otherwise (config.ts): a step asking for it is a simulation bug.
    if (settings.isolationMs <= settings.ttlMs) throw new Error(`invalid lease settings ${JSON.stringify(settings)}`);
    const port = this.t.billing.port;
    await this.t.billing.close();
    this.t.config = {
      ...this.t.config,
      GRPC_PORT: port,
      LEASE_TTL_MS: settings.ttlMs,
      EDGE_ISOLATION_MS: settings.isolationMs,
    };
    this.settings = settings;
    this.t.billing = await startBilling(this.t.config, createLogger("sim-billing", "silent"), {
      clock: () => new Date(this.clockMs),
      counterPruneIntervalMs: 3_600_000,
      janitorIntervalMs: 3_600_000,
      renewalIntervalMs: 3_600_000,
      leaseCloserIntervalMs: 3_600_000,
      leaseCloserAtStart: false, // the closer runs as a step of its own, never beside one
    });
    // Both clients reconnect within their backoff: the harness's (top-ups, pauses) and the edges'.
    // The edges' reconnects on a real timer (a second or so) the simulated clock knows nothing of:
    // left to it, every lease call of the next steps failed as if billing were down, without a
    // step saying so, and a quiet point right after a restart found the edges unanswered.
    for (let tries = 0; ; tries++) {
      try {
        await this.t.client.getBalance({ accountId: randomUUID() });
        await this.#edgesChannel.getBalance({ accountId: randomUUID() });
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
