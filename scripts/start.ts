/**
 * `npm start`: the whole system on one machine. Checks PostgreSQL and NATS, generates secrets
 * once into .env.local, starts every service as its own process (the services create the
 * database schema and run migrations), waits for the edge, and prints the URL, the admin token
 * and a working API key for a demo account.
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { ensureDatabase } from "@mkt/runtime/db";
import { GENERATED_SECRETS, loadEnvFile, saveEnvFile } from "./lib/env-file.ts";
import { checkNats, checkPostgres } from "./lib/preflight.ts";
import { startProcesses, waitForHttp } from "./lib/processes.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const envPath = join(root, ".env.local");

const env = (name: string, fallback: string) => process.env[name] ?? fallback;
const DATABASE_URL = env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/marketplace");
const NATS_URL = env("NATS_URL", "nats://127.0.0.1:4222");
const HOST = env("HOST", "127.0.0.1");
const PORT = env("PORT", "8080");
const ports = {
  accounts: env("ACCOUNTS_GRPC_PORT", "50051"),
  billing: env("BILLING_GRPC_PORT", "50052"),
  registry: env("REGISTRY_GRPC_PORT", "50053"),
  localModel: env("LOCAL_MODEL_PORT", "8090"),
};

function fail(message: string): never {
  console.error(`\n✖ ${message}\n`);
  process.exit(1);
}

const stored = loadEnvFile(envPath);
for (const [name, generate] of Object.entries(GENERATED_SECRETS)) {
  if (!process.env[name] && !stored[name]) stored[name] = generate();
}
saveEnvFile(envPath, stored);
const secrets = Object.fromEntries(
  Object.keys(GENERATED_SECRETS).map((name) => [name, process.env[name] ?? stored[name]!]),
);

try {
  await checkPostgres(DATABASE_URL);
  await checkNats(NATS_URL);
  await ensureDatabase(DATABASE_URL);
} catch (err) {
  fail((err as Error).message);
}

const common = { DATABASE_URL, NATS_URL, LOG_LEVEL: env("LOG_LEVEL", "info"), EVENTS_PREFIX: env("EVENTS_PREFIX", "") };
const addr = (port: string) => `127.0.0.1:${port}`;
const supervisor = startProcesses(
  root,
  [
    {
      name: "local-model",
      entry: "hoster-server/src/main.ts",
      env: { HOST: "127.0.0.1", PORT: ports.localModel, HOSTER_SERVER_TOKEN: secrets.LOCAL_MODEL_TOKEN! },
    },
    { name: "accounts", entry: "services/accounts/src/main.ts", env: { ...common, GRPC_PORT: ports.accounts } },
    {
      name: "billing",
      entry: "services/billing/src/main.ts",
      env: {
        ...common,
        GRPC_PORT: ports.billing,
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
        GRPC_PORT: ports.registry,
        BILLING_ADDR: addr(ports.billing),
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
        HOST,
        PORT,
        ACCOUNTS_ADDR: addr(ports.accounts),
        BILLING_ADDR: addr(ports.billing),
        REGISTRY_ADDR: addr(ports.registry),
        ADMIN_TOKEN: secrets.ADMIN_TOKEN!,
      },
    },
  ],
  (what, tail) => {
    console.error(`\n✖ ${what}. Last lines of its log:\n${tail}`);
    void supervisor.stopAll().then(() => process.exit(1));
  },
);

const shutdown = () => void supervisor.stopAll().then(() => process.exit(0));
process.once("SIGINT", shutdown);
process.once("SIGTERM", shutdown);

const base = `http://${HOST === "0.0.0.0" ? "127.0.0.1" : HOST}:${PORT}`;
if (!(await waitForHttp(`${base}/readyz`, 60_000))) {
  await supervisor.stopAll();
  fail(`the edge did not become ready at ${base}/readyz within 60 s; see logs/*.log`);
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
  if (!res.ok) fail(`could not create the demo account: ${res.status} ${await res.text()}`);
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
  if (!res.ok) fail(`could not create an invite code: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { data: Array<{ invite_code: string }> }).data[0]!.invite_code;
}

const apiKey = await demoApiKey();
const invite = await inviteCode();
console.log(`
  Inference marketplace is running.

  URL          ${base}/v1        (OpenAPI docs: ${base}/docs)
  API key      ${apiKey}
  Admin token  ${secrets.ADMIN_TOKEN}
  Invite code  ${invite}   (single use; more with: npm run admin -- invite)
  Logs         ${join(root, "logs")}/<service>.log

  Try it:
    curl ${base}/v1/chat/completions -H "Authorization: Bearer ${apiKey}" \\
      -H "Content-Type: application/json" \\
      -d '{"model":"auto","messages":[{"role":"user","content":"Hello!"}]}'

  Ctrl-C stops everything.
`);
