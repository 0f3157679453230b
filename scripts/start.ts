/**
 * `npm start`: the whole system on one machine. Finds PostgreSQL and NATS, or runs its own
 * (scripts/lib/local-infra.ts), generates secrets once into .env.local and a CA with one
 * certificate per service once into .data/tls (mTLS between the services), creates each service's
 * two database roles (docs/deploy.md, "Database roles"), starts every service as its own
 * supervised process (each migrates its schema as the schema's owner, then runs as its own role),
 * waits for the edge, and prints the URL, the admin token and a working API key for a demo
 * account. A crashed process is restarted; Ctrl-C stops everything in order.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { ensureDatabase } from "@mkt/runtime/db";
import {
  DATABASE_SERVICES,
  ensureServiceRoles,
  roleUrl,
  serviceRoleNames,
  type DatabaseService,
  type ServiceDatabase,
} from "@mkt/runtime/database-roles";
import { ensureServiceCertificates, serviceTlsEnv } from "@mkt/runtime/service-certificates";
import { GENERATED_SECRETS, loadEnvFile, saveEnvFile } from "./lib/env-file.ts";
import { natsFor, postgresFor, type Dependency } from "./lib/local-infra.ts";
import { checkNats, checkPostgres } from "./lib/preflight.ts";
import { waitForHttp } from "./lib/processes.ts";
import { Supervisor, type SupervisedSpec } from "./lib/supervisor.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
// Where this launcher keeps what it generates: .env.local, logs/ and .data/ (the embedded
// PostgreSQL and NATS, and tls/: the services' CA and certificates). A test points it elsewhere
// so it leaves a developer's state alone.
const stateDir = process.env.START_STATE_DIR ?? root;
const envPath = join(stateDir, ".env.local");

const env = (name: string, fallback: string) => process.env[name] ?? fallback;
const HOST = env("HOST", "127.0.0.1");
const PORT = env("PORT", "8080");
const ports = {
  accounts: env("ACCOUNTS_GRPC_PORT", "50051"),
  billing: env("BILLING_GRPC_PORT", "50052"),
  registry: env("REGISTRY_GRPC_PORT", "50053"),
  // Prometheus listeners (GET /metrics); the services' own defaults, overridable like the others.
  // They also answer the probes, /healthz and /readyz, without a client certificate.
  accountsMetrics: env("ACCOUNTS_METRICS_PORT", "9466"),
  billingMetrics: env("BILLING_METRICS_PORT", "9465"),
  registryMetrics: env("REGISTRY_METRICS_PORT", "9464"),
  localModel: env("LOCAL_MODEL_PORT", "8090"),
  demoHoster: env("DEMO_HOSTER_PORT", "8091"),
  demoHoster2: env("DEMO_HOSTER_2_PORT", "8092"),
};

/** The public model both demo hosters serve: a newcomer sees routing between two endpoints. */
const DEMO_MODEL = "demo/open-8b";

/**
 * Two independent hosters' servers, as hosters would run them, each registered below with the same
 * public model on an open pay-as-you-go plan: one cheaper and quantized, one dearer in bf16. Each
 * prices cached input at a tenth of its input price, as the big APIs do, and the demo model keeps a
 * prefix cache, so a conversation's second turn shows a cache hit and what it saved.
 */
const DEMO_HOSTERS = [
  {
    process: "demo-hoster",
    name: "Demo GPUs",
    port: ports.demoHoster,
    modelId: "open-8b.Q4_K_M.gguf",
    quantization: "q4_k_m",
    prices: { input: 0.05, cachedInput: 0.005, output: 0.1 },
    emailKey: "DEMO_HOSTER_EMAIL",
  },
  {
    process: "demo-hoster-2",
    name: "Demo Labs",
    port: ports.demoHoster2,
    modelId: "open-8b.bf16.gguf",
    quantization: "bf16",
    prices: { input: 0.1, cachedInput: 0.01, output: 0.2 },
    emailKey: "DEMO_HOSTER_2_EMAIL",
  },
] as const;

// Edge first (stop accepting, drain streams), then what the edge calls, then the dependencies
// npm start runs itself, so every process can still settle into them while it drains.
const supervisor = new Supervisor({
  root,
  logDir: join(stateDir, "logs"),
  stopOrder: [
    ["edge"],
    ["registry"],
    ["billing", "accounts"],
    ["local-model", "demo-hoster", "demo-hoster-2"],
    ["nats", "postgres"],
  ],
});

async function fail(message: string): Promise<never> {
  console.error(`\n✖ ${message}\n`);
  await supervisor.stop();
  process.exit(1);
}

let stopping = false;
const shutdown = (signal: string) => {
  // npm passes the terminal's Ctrl-C on to this process, which gets it from the terminal too.
  if (stopping) return;
  stopping = true;
  console.log(`\n${signal}: stopping the edge, then registry, then billing and accounts, then the rest…`);
  void supervisor.stop().then(() => process.exit(0));
};
process.on("SIGINT", shutdown);
process.on("SIGTERM", shutdown);

const stored = loadEnvFile(envPath);
for (const [name, generate] of Object.entries(GENERATED_SECRETS)) {
  if (!process.env[name] && !stored[name]) stored[name] = generate();
}
saveEnvFile(envPath, stored);
const secrets = Object.fromEntries(
  Object.keys(GENERATED_SECRETS).map((name) => [name, process.env[name] ?? stored[name]!]),
);

// The services' CA is made once and kept; a certificate is reissued when missing or near expiry.
const tlsDir = join(stateDir, ".data", "tls");
await ensureServiceCertificates(tlsDir);

// npm ci builds the portal (the root `prepare` script); a checkout installed otherwise builds it here.
if (!existsSync(join(root, "portal/dist/index.html"))) {
  console.log("building the web portal (portal/dist)…");
  execFileSync("npm", ["run", "build", "-w", "@mkt/portal"], { cwd: root, stdio: "inherit" });
}

/** A configured or running dependency must answer now; one started here gets time to come up. */
async function ready(dependency: Dependency, check: (url: string) => Promise<void>): Promise<void> {
  if (!dependency.spec) return check(dependency.url);
  const deadline = Date.now() + 90_000;
  for (;;) {
    try {
      return await check(dependency.url);
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 300));
    }
  }
}

let postgres!: Dependency, nats!: Dependency;
try {
  const dataDir = join(stateDir, ".data");
  postgres = await postgresFor(process.env, dataDir);
  nats = await natsFor(process.env, dataDir);
  for (const [what, dependency] of [
    ["PostgreSQL", postgres],
    ["NATS", nats],
  ] as const) {
    console.log(`${what}: ${dependency.origin}`);
    if (dependency.spec) supervisor.start(dependency.spec);
  }
  await ready(postgres, checkPostgres);
  await ready(nats, checkNats);
  await ensureDatabase(postgres.url);
} catch (err) {
  await fail((err as Error).message);
}

// Each service runs as a role with rows of its own schema only, and migrates as the schema's
// owner. The passwords are new at every start (the roles are set to them before any service
// starts); the PostgreSQL user of DATABASE_URL creates the roles, so it needs CREATEROLE.
const databases = Object.fromEntries(
  DATABASE_SERVICES.map((schema) => {
    const roles = serviceRoleNames(schema);
    const password = () => randomBytes(18).toString("hex");
    const url = roleUrl(postgres.url, roles.runtime, password());
    return [schema, { schema, url, migrateUrl: roleUrl(postgres.url, roles.owner, password()) }];
  }),
) as Record<DatabaseService, ServiceDatabase>;
try {
  await ensureServiceRoles(postgres.url, Object.values(databases));
} catch (err) {
  await fail(
    `could not create the services' database roles (${(err as Error).message}): the user of DATABASE_URL must be ` +
      `a superuser or have CREATEROLE (docs/deploy.md, "Database roles")`,
  );
}
const database = (service: DatabaseService) => ({
  DATABASE_URL: databases[service].url,
  MIGRATE_DATABASE_URL: databases[service].migrateUrl,
});
const NATS_URL = nats.url;

const common = { NATS_URL, LOG_LEVEL: env("LOG_LEVEL", "info"), EVENTS_PREFIX: env("EVENTS_PREFIX", "") };
const addr = (port: string) => `127.0.0.1:${port}`;
const services: SupervisedSpec[] = [
  {
    name: "local-model",
    entry: "hoster-server/src/main.ts",
    env: { HOST: "127.0.0.1", PORT: ports.localModel, HOSTER_SERVER_TOKEN: secrets.LOCAL_MODEL_TOKEN! },
  },
  ...DEMO_HOSTERS.map((hoster) => ({
    name: hoster.process,
    entry: "hoster-server/src/main.ts",
    env: {
      HOST: "127.0.0.1",
      PORT: hoster.port,
      HOSTER_SERVER_TOKEN: secrets.DEMO_HOSTER_TOKEN!,
      DEMO_MODELS: hoster.modelId,
    },
  })),
  {
    name: "accounts",
    entry: "services/accounts/src/main.ts",
    env: {
      ...common,
      ...database("accounts"),
      ...serviceTlsEnv(tlsDir, "accounts"),
      GRPC_PORT: ports.accounts,
      METRICS_PORT: ports.accountsMetrics,
    },
  },
  {
    name: "billing",
    entry: "services/billing/src/main.ts",
    env: {
      ...common,
      ...database("billing"),
      ...serviceTlsEnv(tlsDir, "billing"),
      GRPC_PORT: ports.billing,
      METRICS_PORT: ports.billingMetrics,
      ACCOUNTS_ADDR: addr(ports.accounts),
      REGISTRY_ADDR: addr(ports.registry),
      SECRETS_KEY: secrets.SECRETS_KEY!,
    },
  },
  {
    name: "registry",
    entry: "services/registry/src/main.ts",
    env: {
      ...common,
      ...database("registry"),
      ...serviceTlsEnv(tlsDir, "registry"),
      GRPC_PORT: ports.registry,
      METRICS_PORT: ports.registryMetrics,
      ACCOUNTS_ADDR: addr(ports.accounts),
      LOCAL_MODEL_URL: `http://127.0.0.1:${ports.localModel}`,
      LOCAL_MODEL_TOKEN: secrets.LOCAL_MODEL_TOKEN!,
      SECRETS_KEY: secrets.SECRETS_KEY!,
      // A local demo registers hoster servers running on this machine.
      ALLOW_PRIVATE_UPSTREAMS: env("ALLOW_PRIVATE_UPSTREAMS", "true"),
    },
  },
  {
    name: "edge",
    entry: "edge/src/main.ts",
    env: {
      ...common,
      ...serviceTlsEnv(tlsDir, "edge"),
      HOST,
      PORT,
      ACCOUNTS_ADDR: addr(ports.accounts),
      BILLING_ADDR: addr(ports.billing),
      REGISTRY_ADDR: addr(ports.registry),
      ADMIN_TOKEN: secrets.ADMIN_TOKEN!,
      // The edge relays chats: a local demo's hoster servers run on this machine.
      ALLOW_PRIVATE_UPSTREAMS: env("ALLOW_PRIVATE_UPSTREAMS", "true"),
    },
  },
];
for (const spec of services) supervisor.start(spec);

const base = `http://${HOST === "0.0.0.0" ? "127.0.0.1" : HOST}:${PORT}`;
// A first start on a slow machine runs every migration; a crashing service is restarted meanwhile.
if (!(await waitForHttp(`${base}/readyz`, 120_000))) {
  await fail(`the edge did not become ready at ${base}/readyz within 120 s; see ${join(stateDir, "logs")}/*.log`);
}

/** The demo account's key is kept in .env.local; a new account is made when it no longer works. */
async function demoApiKey(): Promise<string> {
  const saved = process.env.DEMO_API_KEY ?? stored.DEMO_API_KEY;
  if (saved) {
    const res = await fetch(`${base}/v1/usage`, { headers: { authorization: `Bearer ${saved}` } });
    if (res.ok) return saved;
  }
  const res = await fetch(`${base}/v1/accounts`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email: `demo+${Date.now()}@example.com`, password: randomBytes(18).toString("base64url") }),
  });
  if (!res.ok) return fail(`could not create the demo account: ${res.status} ${await res.text()}`);
  const { api_key } = (await res.json()) as { api_key: string };
  stored.DEMO_API_KEY = api_key;
  saveEnvFile(envPath, stored);
  return api_key;
}

/** A fresh single-use code for registering a hoster (POST /hosters/register). */
async function inviteCode(): Promise<string> {
  const res = await fetch(`${base}/admin/invites`, {
    method: "POST",
    headers: { authorization: `Bearer ${secrets.ADMIN_TOKEN}` },
  });
  if (!res.ok) return fail(`could not create an invite code: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { data: Array<{ invite_code: string }> }).data[0]!.invite_code;
}

/**
 * A demo hoster: registered once (its e-mail kept in .env.local), with its model on an open
 * pay-as-you-go plan, so that a newcomer sees an open model's endpoints, routing between them and
 * a hoster's portal at once. A failure here is reported and the system keeps running.
 */
async function seedDemoHoster(hoster: (typeof DEMO_HOSTERS)[number]): Promise<string | undefined> {
  const password = secrets.DEMO_HOSTER_PASSWORD!;
  const post = (path: string, body: unknown, cookie?: string) =>
    fetch(`${base}${path}`, {
      method: "POST",
      // A cookie-authenticated change names its origin (the edge refuses a foreign one).
      headers: { "content-type": "application/json", ...(cookie ? { cookie, origin: base } : {}) },
      body: JSON.stringify(body),
    });
  const saved = process.env[hoster.emailKey] ?? stored[hoster.emailKey];
  if (saved && (await post("/hosters/login", { email: saved, password })).ok) return saved;
  const email = `${hoster.process}+${Date.now()}@example.com`;
  const registered = await post("/hosters/register", {
    name: hoster.name,
    email,
    endpoint_url: `http://127.0.0.1:${hoster.port}`,
    api_key: secrets.DEMO_HOSTER_TOKEN,
    invite_code: await inviteCode(),
    password,
    models: [
      {
        model_id: hoster.modelId,
        model_alias: "Open 8B (demo)",
        context_window: 8192,
        canonical_id: DEMO_MODEL,
        quantization: hoster.quantization,
      },
    ],
  });
  if (!registered.ok) {
    console.warn(`could not register ${hoster.name}: ${registered.status} ${await registered.text()}`);
    return undefined;
  }
  const cookie = (registered.headers.getSetCookie()[0] ?? "").split(";")[0]!;
  const plan = await post(
    "/hosters/products",
    {
      name: "Open PAYG",
      pricing_model: "payg",
      input_price_per_1m_usd: hoster.prices.input,
      cached_input_price_per_1m_usd: hoster.prices.cachedInput,
      output_price_per_1m_usd: hoster.prices.output,
      open: true,
    },
    cookie,
  );
  if (!plan.ok) console.warn(`could not create ${hoster.name}'s open plan: ${plan.status} ${await plan.text()}`);
  stored[hoster.emailKey] = email;
  saveEnvFile(envPath, stored);
  return email;
}

const apiKey = await demoApiKey();
const [demoHosterEmail, secondDemoHosterEmail] = [
  await seedDemoHoster(DEMO_HOSTERS[0]),
  await seedDemoHoster(DEMO_HOSTERS[1]),
];
const invite = await inviteCode();
console.log(`
  Inference marketplace is running.

  URL          ${base}/v1        (OpenAPI docs: ${base}/docs)
  Portal       ${base}/portal/
  API key      ${apiKey}
  Admin token  ${secrets.ADMIN_TOKEN}
  Invite code  ${invite}   (single use; more with: npm run admin -- invite)
  Demo hoster  ${demoHosterEmail ? `${demoHosterEmail}, password in .env.local (DEMO_HOSTER_PASSWORD)` : "not registered (see above)"}
  Demo hoster  ${secondDemoHosterEmail ? `${secondDemoHosterEmail}, the same password` : "not registered (see above)"}
  Open model   ${DEMO_MODEL} (2 endpoints): ${base}/v1/models/${DEMO_MODEL}/endpoints
  PostgreSQL   ${postgres.origin}
  NATS         ${nats.origin}
  Logs         ${join(stateDir, "logs")}/<service>.log
  Certificates ${tlsDir}   (mTLS between the services; the CA is kept)

  Try it:
    curl ${base}/v1/chat/completions -H "Authorization: Bearer ${apiKey}" \\
      -H "Content-Type: application/json" \\
      -d '{"model":"auto","messages":[{"role":"user","content":"Hello!"}]}'

  A process that crashes is restarted. Ctrl-C stops everything, the edge first.
`);
