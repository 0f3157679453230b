import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openBillingDb, type BillingDb } from "./billing-db.ts";
import { NODE, root } from "./child-process.ts";
import { registerOpenHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";

// OpenAI's Codex CLI (the @openai/codex dev dependency, a native binary per platform) pointed at
// the gateway as its README shows: a model provider with wire_api "responses", the key in the
// environment variable its env_key names, headless `codex exec`, nothing persisted. Codex sends
// its own tool types (custom freeform tools, tool search, web search) and runs the tools the
// model calls itself; the demo model calls one only when the last user message asks for it.

const CODEX = join(root, "node_modules/@openai/codex/bin/codex.js");

/** Why Codex cannot run here, or undefined when it can (it runs offline; only its binary is needed). */
function codexMissing(): string | undefined {
  const run = spawnSync(NODE, [CODEX, "--version"], { encoding: "utf8", timeout: 30_000 });
  if (run.status === 0 && /codex-cli/.test(run.stdout)) return undefined;
  return `Codex CLI does not run on ${process.platform}-${process.arch}: ${(run.stderr || String(run.error)).slice(0, 300)}`;
}
const missing = codexMissing();
if (missing) console.warn(`skipping the Codex CLI tests: ${missing}`);

interface Usage {
  usage_30d: { total_requests: number; total_input_tokens: number; total_output_tokens: number };
}

interface CodexRun {
  code: number | null;
  lastMessage: string;
  /** `codex exec --json`'s events, one JSON object a line. */
  events: Array<Record<string, any>>; // eslint-disable-line @typescript-eslint/no-explicit-any
  output: string;
  /** Where it ran (its CODEX_HOME too). */
  cwd: string;
}

let system: RunningSystem;
const homes: string[] = [];
beforeAll(async () => {
  if (!missing) system = await startSystem();
});
afterAll(async () => {
  await system?.close();
  for (const home of homes) rmSync(home, { recursive: true, force: true });
});

/** One headless `codex exec` turn with a fresh CODEX_HOME whose config names the gateway. */
async function codexExec(apiKey: string, prompt: string, flags: string[] = [], model = "gpt-5.5"): Promise<CodexRun> {
  const home = mkdtempSync(join(tmpdir(), "codex-home-"));
  homes.push(home);
  writeFileSync(
    join(home, "config.toml"),
    [
      `model = "${model}"`,
      'model_provider = "marketplace"',
      "[model_providers.marketplace]",
      'name = "Marketplace"',
      `base_url = "${system.url}/v1"`,
      'wire_api = "responses"',
      'env_key = "MARKETPLACE_API_KEY"',
      // A retried turn would be billed again; the tests count requests.
      "request_max_retries = 0",
      "stream_max_retries = 0",
      "",
    ].join("\n"),
  );
  const lastMessageFile = join(home, "last-message.txt");
  const args = [
    CODEX,
    "exec",
    "--skip-git-repo-check",
    "--ephemeral",
    "--json",
    "-o",
    lastMessageFile,
    ...flags,
    prompt,
  ];
  const child = spawn(NODE, args, {
    cwd: home,
    env: { ...process.env, CODEX_HOME: home, MARKETPLACE_API_KEY: apiKey, RUST_LOG: "error" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  const events = stdout
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
  let lastMessage = "";
  try {
    lastMessage = readFileSync(lastMessageFile, "utf8");
  } catch {
    // No last message: the run failed; `output` says why.
  }
  return { code, lastMessage, events, output: `${stdout}\n${stderr}`.slice(-4000), cwd: home };
}

describe.skipIf(missing !== undefined)("Codex CLI (codex exec, wire_api responses)", () => {
  it("answers a turn with the demo model's text, exits 0, and is billed once", async () => {
    const { apiKey } = await signUp(system.url);
    const run = await codexExec(apiKey, "Say hello to the marketplace.");
    expect(run.code, run.output).toBe(0);
    expect(run.lastMessage.trim().length).toBeGreaterThan(0);
    const messages = run.events.filter((e) => e.type === "item.completed" && e.item?.type === "agent_message");
    expect(messages.map((e) => e.item.text)).toEqual([run.lastMessage.trim()]);

    const usage = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests >= 1);
    // Settled once: one request, with the tokens of Codex's whole prompt.
    await new Promise((r) => setTimeout(r, 1000));
    const settled = await waitForUsage<Usage>(system.url, apiKey, () => true);
    expect(settled.usage_30d).toEqual(usage.usage_30d);
    expect(usage.usage_30d.total_requests).toBe(1);
    expect(usage.usage_30d.total_input_tokens).toBeGreaterThan(1000);
    expect(usage.usage_30d.total_output_tokens).toBeGreaterThan(0);
  }, 120_000);

  it("runs the function tool the demo model calls (exec_command), sends the result back, and answers to the end", async () => {
    const { apiKey } = await signUp(system.url);
    const run = await codexExec(apiKey, 'call exec_command {"cmd":"echo codex-ran-this","login":false}');
    expect(run.code, run.output).toBe(0);
    const commands = run.events.filter((e) => e.type === "item.completed" && e.item?.type === "command_execution");
    expect(commands.map((e) => e.item)).toEqual([
      expect.objectContaining({
        status: "completed",
        aggregated_output: expect.stringContaining("codex-ran-this\n"),
        exit_code: 0,
      }),
    ]);
    expect(run.lastMessage.trim().length).toBeGreaterThan(0);
    // Two requests: the call, then the answer to its result.
    const usage = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests >= 2);
    expect(usage.usage_30d.total_requests).toBe(2);
  }, 120_000);

  it("runs the custom freeform tool the demo model calls (apply_patch) with its free-text input", async () => {
    const { apiKey } = await signUp(system.url);
    const patch = "*** Begin Patch\n*** Add File: hello.txt\n+hello from the demo model\n*** End Patch\n";
    const run = await codexExec(apiKey, `call apply_patch ${JSON.stringify({ input: patch })}`, [
      "-s",
      "workspace-write",
    ]);
    expect(run.code, run.output).toBe(0);
    expect(readFileSync(join(run.cwd, "hello.txt"), "utf8")).toBe("hello from the demo model\n");
    expect(run.lastMessage.trim().length).toBeGreaterThan(0);
  }, 120_000);

  it("runs a tool Codex answers itself (get_goal) and answers to the end", async () => {
    const { apiKey } = await signUp(system.url);
    const run = await codexExec(apiKey, "call get_goal {}");
    expect(run.code, run.output).toBe(0);
    expect(run.lastMessage.trim().length).toBeGreaterThan(0);
    const usage = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests >= 2);
    expect(usage.usage_30d.total_requests).toBe(2);
  }, 120_000);

  describe("on an open model with three endpoints", () => {
    const hosters: RegisteredHoster[] = [];
    let db: BillingDb;
    beforeAll(async () => {
      db = await openBillingDb(system.databaseUrl);
      for (const name of ["Alpha", "Beta", "Gamma"]) {
        hosters.push(
          await registerOpenHoster(system, {
            name,
            canonicalId: "acme/codex-coder",
            plan: { input_price_per_1m_usd: 1, cached_input_price_per_1m_usd: 0.1, output_price_per_1m_usd: 2 },
          }),
        );
      }
      // The edge routes from registry's table, which it is sent after every plan change: wait until
      // it lists the three endpoints.
      const { apiKey } = await signUp(system.url);
      const headers = { authorization: `Bearer ${apiKey}` };
      for (;;) {
        const res = await fetch(`${system.url}/v1/models`, { headers });
        const models = ((await res.json()) as { data?: Array<Record<string, unknown>> }).data ?? [];
        if (models.some((m) => m.id === "acme/codex-coder" && m.endpoints === 3)) break;
        await new Promise((r) => setTimeout(r, 200));
      }
    }, 60_000);
    afterAll(async () => {
      await db?.close();
      for (const hoster of hosters) await hoster.server.close();
    });

    it("keeps a turn's requests on one endpoint by its prompt_cache_key: the second is a cache hit, charged the cached price", async () => {
      const { apiKey, accountId } = await signUp(system.url);
      const run = await codexExec(
        apiKey,
        'call exec_command {"cmd":"echo cached-turn","login":false}',
        [],
        "acme/codex-coder",
      );
      expect(run.code, run.output).toBe(0);
      await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests >= 2);
      const records = await db.query<Record<string, string>>(
        `select hoster_id, input_tokens, cached_input_tokens, output_tokens, cost_micros
           from usage_records where account_id = $1 order by created_at`,
        [accountId],
      );
      expect(records).toHaveLength(2);
      const [call, answer] = records as [Record<string, string>, Record<string, string>];
      // Both requests carried Codex's conversation id: one endpoint served them.
      expect(answer.hoster_id).toBe(call.hoster_id);
      expect(Number(call.cached_input_tokens)).toBe(0);
      const cached = BigInt(answer.cached_input_tokens!);
      const input = BigInt(answer.input_tokens!);
      expect(cached).toBeGreaterThan(0n);
      // ceil(((input − cached) × 1 + cached × 0.1 + output × 2) micro-USD), the cost rule.
      const scaled = (input - cached) * 1_000_000n + cached * 100_000n + BigInt(answer.output_tokens!) * 2_000_000n;
      expect(BigInt(answer.cost_micros!)).toBe((scaled + 999_999n) / 1_000_000n);
    }, 120_000);
  });
});
