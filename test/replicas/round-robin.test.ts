/**
 * Two replicas of accounts (the real `main.ts`, as child processes, so a replica can be killed
 * the way a crashed pod dies) behind one client from the shared helper, with an `ipv4:` target
 * listing both: what a headless Service's DNS answer gives an edge in Kubernetes. The client's
 * calls spread over both replicas, and when one is SIGKILLed its share moves to the other within
 * seconds, with errors only for the calls that were on it at that moment.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, expect, it } from "vitest";
import { Metadata, status, type ServiceError } from "@grpc/grpc-js";
import { createClient } from "@mkt/runtime/grpc-client";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { freePort } from "@mkt/testkit/ports";
import { AccountsServiceClient, type CreateAccountResponse } from "@mkt/proto/accounts/v1/accounts";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
/** Node 24, pinned by the `node` dev dependency (the system's node may be older). */
const NODE = join(root, "node_modules/.bin/node");
const CALLERS = 4;

interface Replica {
  port: number;
  process: ChildProcess;
  exited: Promise<unknown>;
}

async function startReplica(env: Record<string, string>): Promise<Replica> {
  const port = await freePort();
  const child = spawn(NODE, [join(root, "services/accounts/src/main.ts")], {
    cwd: root,
    // METRICS_PORT 0: two replicas on one machine cannot share the default.
    env: { ...process.env, ...env, GRPC_PORT: String(port), METRICS_PORT: "0", LOG_LEVEL: "info" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  // main.ts logs "accounts listening" once migrations are applied and the port is bound.
  await new Promise<void>((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (data: Buffer) => {
      out += data.toString("utf8");
      if (out.includes("accounts listening")) resolve();
    });
    void exited.then(() => reject(new Error(`accounts exited before listening:\n${out}`)));
  });
  child.stdout!.resume();
  return { port, process: child, exited };
}

let replicas: Replica[] = [];
let client: AccountsServiceClient;
let accountId: string;

beforeAll(async () => {
  const certs = await testCertificates();
  const env = {
    ...certs.env("accounts"),
    DATABASE_URL: await freshDatabaseUrl(),
    NATS_URL: TEST_NATS_URL,
    EVENTS_PREFIX: freshEventsPrefix(),
  };
  // One after the other: the first applies the migrations, the second finds them done.
  replicas = [await startReplica(env), await startReplica(env)];
  client = createClient(
    AccountsServiceClient,
    `ipv4:${replicas.map((r) => `127.0.0.1:${r.port}`).join(",")}`,
    certs.tls("edge"),
  );
  const created = await new Promise<CreateAccountResponse>((resolve, reject) =>
    client.createAccount(
      { email: "replicas@example.com", password: "correct horse battery", clientIp: "2001:db8::7" },
      (err, res) => (err ? reject(err) : resolve(res)),
    ),
  );
  accountId = created.account!.accountId;
});

afterAll(async () => {
  client?.close();
  for (const replica of replicas) {
    if (replica.process.exitCode === null && replica.process.signalCode === null) replica.process.kill("SIGTERM");
    await replica.exited;
  }
});

/** One GetAccount as a caller sees it, with the replica (port) the channel sent it to. */
interface Outcome {
  startedAt: number;
  endedAt: number;
  port: number;
  error?: ServiceError;
}

function getAccount(): Promise<Outcome> {
  const startedAt = Date.now();
  return new Promise((resolve) => {
    const call = client.getAccount({ accountId }, new Metadata(), { deadline: Date.now() + 5_000 }, (error) => {
      // getPeer() names the address the call was sent to ("127.0.0.1:<port>").
      const port = Number(call.getPeer().split(":").at(-1));
      resolve({ startedAt, endedAt: Date.now(), port, error: error ?? undefined });
    });
  });
}

/** CALLERS loops calling back to back until `until` resolves, as concurrent edge requests would. */
async function callUntil(until: Promise<unknown>): Promise<Outcome[]> {
  let done = false;
  void until.then(() => (done = true));
  const outcomes: Outcome[] = [];
  await Promise.all(
    Array.from({ length: CALLERS }, async () => {
      while (!done) outcomes.push(await getAccount());
    }),
  );
  return outcomes;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const share = (outcomes: Outcome[], port: number) => outcomes.filter((o) => o.port === port).length / outcomes.length;

it("spreads one client's calls over both replicas, and moves a killed replica's share within seconds", async () => {
  const [a, b] = replicas as [Replica, Replica];
  // round_robin connects to every address at once; wait until calls have reached both.
  const warmUp = Date.now() + 5_000;
  const seen = new Set<number>();
  while (seen.size < 2 && Date.now() < warmUp) seen.add((await getAccount()).port);
  expect(seen).toEqual(new Set([a.port, b.port]));

  const balanced = await callUntil(sleep(1_000));
  expect(balanced.filter((o) => o.error)).toEqual([]);
  expect(share(balanced, a.port)).toBeGreaterThan(0.4);
  expect(share(balanced, b.port)).toBeGreaterThan(0.4);

  let killedAt = 0;
  const kill = sleep(500).then(() => {
    killedAt = Date.now();
    a.process.kill("SIGKILL");
    return sleep(2_500);
  });
  const around = await callUntil(kill);
  await a.exited;

  // Only the calls on the killed replica as it died fail: each caller had one on it at most.
  // SIGKILL lands a moment after kill() returns, so "as it died" reaches a little past killedAt.
  const failed = around.filter((o) => o.error);
  expect(failed.length).toBeLessThanOrEqual(CALLERS);
  for (const o of failed) {
    expect(o.port).toBe(a.port);
    expect(o.error!.code).toBe(status.UNAVAILABLE);
    expect(o.startedAt - killedAt).toBeLessThan(100);
  }

  // Everything after that succeeded, on the survivor.
  const after = around.filter((o) => o.startedAt > killedAt + 100);
  expect(after.length).toBeGreaterThan(50);
  expect(after.filter((o) => o.error)).toEqual([]);
  expect(share(after, b.port)).toBe(1);
  // Before the kill, both replicas were serving.
  const before = around.filter((o) => o.endedAt < killedAt);
  expect(share(before, a.port)).toBeGreaterThan(0.3);
});
