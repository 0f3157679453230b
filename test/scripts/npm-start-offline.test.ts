import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";

// The README's `npm start` on a machine where nothing listens: a network namespace of its own
// (`unshare -n`, loopback up) has no PostgreSQL and no NATS, whatever runs on this machine, so
// the launcher runs the embedded PostgreSQL and its own nats-server on the default ports (the
// namespace's own, so a developer's `npm start` is not disturbed). Its generated state (.env.local,
// logs, data) goes to a temporary folder (START_STATE_DIR). Needs root (CI is) and util-linux's
// unshare/nsenter and iproute2's ip (.ci/run installs them).

const root = join(import.meta.dirname, "../..");
const stateDir = mkdtempSync(join(tmpdir(), "npm-start-offline-"));
// Like a checkout: the embedded server, run as the postgres user under root, must reach its data.
chmodSync(stateDir, 0o755);
const BASE = "http://127.0.0.1:8080/v1";

interface Launch {
  child: ChildProcess;
  output: () => string;
  /** npm's exit: after a Ctrl-C it waits for the script, then ends itself by the same signal. */
  exited: Promise<number | NodeJS.Signals | null>;
}

const launches: Launch[] = [];
afterAll(() => {
  for (const { child } of launches) {
    if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, "SIGKILL");
  }
});

function launch(): Launch {
  const env: NodeJS.ProcessEnv = { ...process.env, START_STATE_DIR: stateDir };
  // A configured URL would win over the embedded defaults this test is about.
  for (const name of ["DATABASE_URL", "NATS_URL", "HOST", "PORT", "DEMO_API_KEY"]) delete env[name];
  // A group of its own, as a terminal's foreground job: the test's Ctrl-C goes to that group.
  const child = spawn("unshare", ["-n", "sh", "-c", "ip link set lo up && exec npm start"], {
    cwd: root,
    env,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let text = "";
  child.stdout!.on("data", (chunk: Buffer) => (text += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (text += chunk.toString()));
  const exited = new Promise<number | NodeJS.Signals | null>((resolve) =>
    child.once("exit", (code, signal) => resolve(signal ?? code)),
  );
  const running = { child, output: () => text, exited };
  launches.push(running);
  return running;
}

async function until<T>(what: string, launch: Launch, probe: () => T | undefined, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline || launch.child.exitCode !== null)
      throw new Error(`no ${what}; npm start printed:\n${launch.output()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** The processes in the launcher's network namespace, with their command lines. */
function namespaceProcesses(launch: Launch): Array<{ pid: number; cmdline: string }> {
  const ns = readlinkSync(`/proc/${launch.child.pid}/ns/net`);
  const found = [];
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    try {
      if (readlinkSync(`/proc/${pid}/ns/net`) !== ns) continue;
      found.push({ pid: Number(pid), cmdline: readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ") });
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** One chat answer through the official SDK, from inside the namespace. */
function chat(launch: Launch, apiKey: string, model = "auto"): { model: string; content: string } {
  const out = execFileSync(
    "nsenter",
    [
      "-t",
      String(launch.child.pid),
      "-n",
      process.execPath,
      "test/scripts/fixtures/chat-client.ts",
      BASE,
      apiKey,
      model,
    ],
    { cwd: root, encoding: "utf8", timeout: 20_000, stdio: ["ignore", "pipe", "pipe"] },
  );
  return JSON.parse(out) as { model: string; content: string };
}

/** GET a path of the API with a key, from inside the namespace: the JSON answer. */
function getJson(launch: Launch, apiKey: string, path: string): unknown {
  const script = `fetch(process.argv[1], { headers: { authorization: "Bearer " + process.argv[2] } })
    .then((r) => r.text()).then((t) => process.stdout.write(t))`;
  const out = execFileSync(
    "nsenter",
    ["-t", String(launch.child.pid), "-n", process.execPath, "-e", script, `${BASE}${path}`, apiKey],
    { cwd: root, encoding: "utf8", timeout: 20_000, stdio: ["ignore", "pipe", "pipe"] },
  );
  return JSON.parse(out) as unknown;
}

async function started(launch: Launch): Promise<string> {
  return until("API key", launch, () => /API key\s+(mk_\S+)/.exec(launch.output())?.[1], 150_000);
}

/** Every process whose command line names this test's state folder (embedded postgres, nats-server). */
const leftovers = () =>
  readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(stateDir);
      } catch {
        return false;
      }
    });

async function ctrlC(launch: Launch): Promise<number | NodeJS.Signals | null> {
  process.kill(-launch.child.pid!, "SIGINT");
  return launch.exited;
}

it("starts with embedded PostgreSQL and its own nats-server, survives a killed child, stops in order", async () => {
  const first = launch();
  const apiKey = await started(first);
  const output = first.output();
  expect(output).toMatch(/URL\s+http:\/\/127\.0\.0\.1:8080\/v1/);
  expect(output).toMatch(/Portal\s+http:\/\/127\.0\.0\.1:8080\/portal\//);
  expect(output).toContain(`PostgreSQL   embedded, 127.0.0.1:5432 (data in ${stateDir}/.data/postgres/data)`);
  expect(output).toMatch(/NATS\s+\S*nats-server, 127\.0\.0\.1:4222 \(JetStream store in /);
  expect(chat(first, apiKey).content.length).toBeGreaterThan(0);
  // The demo hosters are registered with one public model on open plans: the endpoints list shows
  // both, cheaper first, and an account key's call to it is routed to one of them.
  const demoHoster = /Demo hoster\s+(\S+@example\.com),/.exec(output)?.[1];
  expect(demoHoster).toBeDefined();
  expect(output).toContain(
    "Open model   demo/open-8b (2 endpoints): http://127.0.0.1:8080/v1/models/demo/open-8b/endpoints",
  );
  expect(getJson(first, apiKey, "/models/demo/open-8b/endpoints")).toMatchObject({
    data: {
      id: "demo/open-8b",
      endpoints: [
        // Cached input at a tenth of the input price: a conversation's second turn is a priced cache hit.
        {
          hoster_name: "Demo GPUs",
          quantization: "q4_k_m",
          cached_input_price_per_1m_usd: 0.005,
          pricing: { prompt: "0.00000005", input_cache_read: "0.000000005" },
          plan: { open: true },
        },
        { hoster_name: "Demo Labs", quantization: "bf16", cached_input_price_per_1m_usd: 0.01, plan: { open: true } },
      ],
    },
  });
  expect(["open-8b.Q4_K_M.gguf", "open-8b.bf16.gguf"]).toContain(chat(first, apiKey, "demo/open-8b").model);

  // kill -9 billing: it comes back, and chat works again (settlement needs it).
  const billing = namespaceProcesses(first).find((p) => p.cmdline.includes("services/billing/src/main.ts"))!;
  process.kill(billing.pid, "SIGKILL");
  await until(
    "restart line",
    first,
    () => (/↻ billing killed by SIGKILL/.test(first.output()) ? true : undefined),
    10_000,
  );
  const answer = await until(
    "chat after billing's restart",
    first,
    () => {
      try {
        return chat(first, apiKey);
      } catch {
        return undefined;
      }
    },
    30_000,
  );
  expect(answer.content.length).toBeGreaterThan(0);
  // A warm chat no longer needs billing (the edge admits on its lease), so the answer does not
  // prove billing is back: its log does, with a second "billing listening" line.
  const billingLog = join(stateDir, "logs", "billing.log");
  await until(
    "billing serving again",
    first,
    () => ((readFileSync(billingLog, "utf8").match(/"msg":"billing listening"/g)?.length ?? 0) >= 2 ? true : undefined),
    30_000,
  );
  expect(namespaceProcesses(first).find((p) => p.cmdline.includes("services/billing/src/main.ts"))?.pid).not.toBe(
    billing.pid,
  );

  // Ctrl-C: stages in order, every process gone (the namespace with them), a clean exit.
  expect(await ctrlC(first)).toBe("SIGINT");
  const stops = first.output().match(/^■ stopped .*$/gm);
  expect(stops).toEqual([
    "■ stopped edge",
    "■ stopped registry",
    "■ stopped billing, accounts",
    "■ stopped local-model, demo-hoster, demo-hoster-2",
    "■ stopped nats, postgres",
  ]);
  expect(leftovers()).toEqual([]);

  // A second start reuses the data: the demo account (and its key) and the demo hoster are still there.
  const second = launch();
  expect(await started(second)).toBe(apiKey);
  expect(second.output()).toContain(`Demo hoster  ${demoHoster},`);
  const postgresLog = readFileSync(join(stateDir, "logs/postgres.log"), "utf8");
  expect(postgresLog.match(/creating the embedded PostgreSQL cluster/g)).toHaveLength(1);
  expect(chat(second, apiKey).content.length).toBeGreaterThan(0);
  expect(await ctrlC(second)).toBe("SIGINT");
  expect(leftovers()).toEqual([]);
}, 240_000);
