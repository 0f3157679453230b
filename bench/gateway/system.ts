/**
 * Our system for the benchmark, started like scripts/start.ts does (each service its own process)
 * but on free ports, with generated secrets, the bench's own database and NATS prefix, a `bench`
 * tier without practical limits, and its logs in logs/bench-gateway-<time>/.
 *
 * The upstream (hoster-server's demo model, "local-model") runs under a supervisor of its own so
 * it can be restarted with other settings on the same port: scenarios 1–2 want a short, instant
 * completion, scenarios 3–4 a 200-token answer paced at 50 tokens/s. Restarting it in place keeps
 * the registry's LOCAL_MODEL_URL valid, so the registry, billing and the edge keep running (and
 * keep their memory history) across all scenarios.
 */
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { freePort } from "@mkt/testkit/ports";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { startProcesses, waitForHttp, type ProcessSpec, type StartedProcesses } from "../../scripts/lib/processes.ts";
import type { MetricsSources } from "./step-histograms.ts";

export interface Account {
  accountId: string;
  apiKey: string;
}

export interface ModelSettings {
  completionTokens: number;
  tokensPerSecond: number;
}

/** What the registry is told the model costs (its default demo-small prices), micro-USD per 1M tokens. */
export const MODEL_PRICES = { input: 500_000n, output: 1_500_000n };

export interface SystemOptions {
  root: string;
  logDir: string;
  databaseUrl: string;
  natsUrl: string;
  eventsPrefix: string;
  model: string;
  /** The model's context window (default 8192, the registry's demo model). */
  contextWindow?: number;
  logLevel: string;
  /** Added to every process's environment (the tracing test points OTEL_* at its receiver). */
  env?: Record<string, string>;
  /** Our processes (by name) that write a V8 CPU profile into `<logDir>/profiles` when they stop. */
  cpuProfiles?: readonly string[];
  onCrash: (what: string, tail: string) => void;
}

export class System {
  readonly adminToken = `mk_admin_${randomBytes(24).toString("base64url")}`;
  readonly modelToken = randomBytes(24).toString("base64url");
  readonly secretsKey = randomBytes(32).toString("hex");
  services: StartedProcesses | undefined;
  upstream: StartedProcesses | undefined;
  edgeUrl = "";
  /** Where the edge and the registry expose their Prometheus metrics. */
  metrics: MetricsSources = { edge: "", registry: "" };
  /** Billing's Prometheus metrics (its lease grants, for the sparse accounts' scenario). */
  billingMetricsUrl = "";
  modelUrl = "";
  private modelPort = 0;
  private readonly options: SystemOptions;

  constructor(options: SystemOptions) {
    this.options = options;
  }

  private modelSpec(settings: ModelSettings): ProcessSpec {
    return {
      name: "local-model",
      entry: "hoster-server/src/main.ts",
      env: {
        HOST: "127.0.0.1",
        PORT: String(this.modelPort),
        HOSTER_SERVER_TOKEN: this.modelToken,
        DEMO_MODELS: this.options.model,
        DEMO_COMPLETION_TOKENS: String(settings.completionTokens),
        DEMO_TOKENS_PER_SECOND: String(settings.tokensPerSecond),
        LOG_LEVEL: this.options.logLevel,
        ...this.options.env,
      },
    };
  }

  /** (Re)starts the upstream with these settings on its port and waits for its /health. */
  async startModel(settings: ModelSettings): Promise<void> {
    if (this.upstream) await this.upstream.stopAll();
    if (!this.modelPort) this.modelPort = await freePort();
    this.modelUrl = `http://127.0.0.1:${this.modelPort}`;
    this.upstream = startProcesses(this.options.root, [this.modelSpec(settings)], this.options.onCrash, {
      logDir: this.options.logDir,
    });
    if (!(await waitForHttp(`${this.modelUrl}/health`, 30_000))) throw new Error("the local model did not start");
  }

  /** Starts accounts, billing, registry and the edge, and waits for the edge's /readyz. */
  async startServices(): Promise<void> {
    const [accounts, accountsMetrics, billing, billingMetrics, registry, registryMetrics, edge] = await Promise.all([
      freePort(),
      freePort(),
      freePort(),
      freePort(),
      freePort(),
      freePort(),
      freePort(),
    ]);
    const addr = (port: number) => `127.0.0.1:${port}`;
    const o = this.options;
    // mTLS between the services, as in production (a CA of the bench's own, in a temporary folder).
    const certs = await testCertificates();
    const common = {
      DATABASE_URL: o.databaseUrl,
      NATS_URL: o.natsUrl,
      EVENTS_PREFIX: o.eventsPrefix,
      LOG_LEVEL: o.logLevel,
      ...o.env,
    };
    const profileDir = join(o.logDir, "profiles");
    const profiled = (spec: ProcessSpec): ProcessSpec =>
      o.cpuProfiles?.includes(spec.name)
        ? {
            ...spec,
            env: {
              ...spec.env,
              NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${profileDir} --cpu-prof-name=${spec.name}.cpuprofile`,
            },
          }
        : spec;
    this.services = startProcesses(
      o.root,
      [
        {
          name: "accounts",
          entry: "services/accounts/src/main.ts",
          env: {
            ...common,
            ...certs.env("accounts"),
            GRPC_PORT: String(accounts),
            METRICS_PORT: String(accountsMetrics),
            DEFAULT_TIER: "bench",
            // The bench signs its accounts up through the public API, all from 127.0.0.1.
            SIGNUP_LIMIT_PER_IP_PER_HOUR: "1000000",
          },
        },
        {
          name: "billing",
          entry: "services/billing/src/main.ts",
          env: {
            ...common,
            ...certs.env("billing"),
            GRPC_PORT: String(billing),
            // A free port, not the default 9465: several benches or a launcher may run at once.
            METRICS_PORT: String(billingMetrics),
            ACCOUNTS_ADDR: addr(accounts),
            REGISTRY_ADDR: addr(registry),
            SECRETS_KEY: this.secretsKey,
            TIERS: JSON.stringify({
              free: { limit_per_minute: 60, limit_per_day: 1000 },
              bench: { limit_per_minute: 100_000_000, limit_per_day: 1_000_000_000 },
            }),
          },
        },
        {
          name: "registry",
          entry: "services/registry/src/main.ts",
          env: {
            ...common,
            ...certs.env("registry"),
            GRPC_PORT: String(registry),
            METRICS_PORT: String(registryMetrics),
            ACCOUNTS_ADDR: addr(accounts),
            LOCAL_MODEL_URL: this.modelUrl,
            LOCAL_MODEL_TOKEN: this.modelToken,
            // The registry's default catalogue, spelled out so the bench knows the prices it checks.
            LOCAL_MODELS: JSON.stringify([
              {
                model_id: o.model,
                model_alias: "Bench model",
                context_window: o.contextWindow ?? 8192,
                input_price_per_1m_usd: "0.50",
                output_price_per_1m_usd: "1.50",
              },
            ]),
            SECRETS_KEY: this.secretsKey,
            ALLOW_PRIVATE_UPSTREAMS: "true",
          },
        },
        {
          name: "edge",
          entry: "edge/src/main.ts",
          env: {
            ...common,
            ...certs.env("edge"),
            HOST: "127.0.0.1",
            PORT: String(edge),
            ACCOUNTS_ADDR: addr(accounts),
            BILLING_ADDR: addr(billing),
            REGISTRY_ADDR: addr(registry),
            ADMIN_TOKEN: this.adminToken,
            ALLOW_PRIVATE_UPSTREAMS: "true",
          },
        },
      ].map(profiled),
      o.onCrash,
      { logDir: o.logDir },
    );
    this.edgeUrl = `http://127.0.0.1:${edge}`;
    this.metrics = { edge: `${this.edgeUrl}/metrics`, registry: `http://127.0.0.1:${registryMetrics}/metrics` };
    this.billingMetricsUrl = `http://127.0.0.1:${billingMetrics}/metrics`;
    if (!(await waitForHttp(`${this.edgeUrl}/readyz`, 90_000))) throw new Error("the edge did not become ready");
  }

  /** Our processes' ids, for RSS sampling. */
  pids(): Record<string, number> {
    const pids: Record<string, number> = {};
    for (const name of ["edge", "registry", "billing", "accounts"]) {
      const pid = this.services?.child(name)?.pid;
      if (pid) pids[name] = pid;
    }
    return pids;
  }

  /** The upstream's process id (it is restarted between scenarios). */
  modelPid(): number | undefined {
    return this.upstream?.child("local-model")?.pid;
  }

  /** Signs `count` accounts up through POST /v1/accounts and tops each up through the admin API. */
  async createAccounts(count: number, topUpUsd: number, parallel = 8): Promise<Account[]> {
    const accounts: Account[] = [];
    const stamp = Date.now().toString(36);
    let next = 0;
    const worker = async () => {
      while (next < count) {
        const i = next++;
        const res = await fetch(`${this.edgeUrl}/v1/accounts`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            email: `bench-${stamp}-${i}@example.com`,
            password: randomBytes(18).toString("base64url"),
          }),
        });
        if (res.status !== 201) throw new Error(`sign-up ${i}: ${res.status} ${await res.text()}`);
        const { account_id, api_key } = (await res.json()) as { account_id: string; api_key: string };
        const topUp = await fetch(`${this.edgeUrl}/admin/accounts/${account_id}/credits`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${this.adminToken}` },
          body: JSON.stringify({ amount_usd: topUpUsd }),
        });
        if (!topUp.ok) throw new Error(`top-up ${i}: ${topUp.status} ${await topUp.text()}`);
        accounts[i] = { accountId: account_id, apiKey: api_key };
      }
    };
    await Promise.all(Array.from({ length: Math.min(parallel, count) }, worker));
    return accounts;
  }

  async stop(): Promise<void> {
    await this.services?.stopAll();
    await this.upstream?.stopAll();
  }
}
