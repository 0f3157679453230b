import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { root } from "./child-process.ts";
import { signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";

// Anthropic's Claude Code as its users install it: the pinned release's native binary, run
// headless (`claude -p`) against the whole system, as a new user points it at the gateway. It is
// proprietary, so it is no dependency here: .ci/run installs the pinned release into .ci/tools
// (docs/adr/0037-coding-agents-tested-as-shipped.md), and these tests skip, saying so, where it is
// absent. With no model set it asks for its default models, which the edge's default
// MODEL_ALIASES send to demo-agent; one run names the model itself, as ANTHROPIC_MODEL lets users.

/** The release CI installs (one line; .ci/run reads it too). */
const PINNED = readFileSync(join(root, ".ci/claude-code-version"), "utf8").trim();
const CLAUDE = process.env.CLAUDE_CODE_BIN ?? join(root, ".ci/tools/claude-code/node_modules/.bin/claude");

/** Why Claude Code cannot run here, or undefined when it can (it needs no network: only its binary). */
function claudeMissing(): string | undefined {
  if (!existsSync(CLAUDE)) {
    return `no binary at ${CLAUDE} (.ci/run installs @anthropic-ai/claude-code@${PINNED} there; or set CLAUDE_CODE_BIN)`;
  }
  const run = spawnSync(CLAUDE, ["--version"], { encoding: "utf8", timeout: 30_000 });
  if (run.status !== 0) return `${CLAUDE} --version failed: ${(run.stderr || String(run.error)).slice(0, 300)}`;
  if (!run.stdout.startsWith(`${PINNED} `)) return `${CLAUDE} is ${run.stdout.trim()}, not the pinned ${PINNED}`;
  return undefined;
}
const missing = claudeMissing();
if (missing) console.warn(`skipping the Claude Code tests: ${missing}`);

interface ClaudeRun {
  code: number | null;
  stdout: string;
  /** The end of stdout and stderr together, for a failure's message. */
  output: string;
  /** Where it ran (its HOME too). */
  cwd: string;
}

/** `--output-format json`'s result, as far as these tests read it. */
interface ClaudeResult {
  is_error: boolean;
  result: string;
  total_cost_usd: number;
  usage: {
    input_tokens: number;
    output_tokens: number;
    cache_read_input_tokens: number;
    cache_creation_input_tokens: number;
  };
}

interface Generation {
  model: string;
  input_tokens: number;
  cached_tokens: number;
  output_tokens: number;
  cost_usd: number;
  finish_reason: string | null;
}

let system: RunningSystem;
const homes: string[] = [];
beforeAll(async () => {
  // As `npm start` runs it, the services' default lease TTL (2 s; the harness's other tests take
  // 10 s for a busy runner): an agent's turn must not outlive what a user's lease allows.
  if (!missing) {
    system = await startSystem({ accounts: { PRINCIPAL_TTL_MS: "2000" }, billing: { LEASE_TTL_MS: "2000" } });
  }
});
afterAll(async () => {
  await system?.close();
  for (const home of homes) rmSync(home, { recursive: true, force: true });
});

/** A fresh directory, removed after the tests. */
function freshHome(): string {
  const home = mkdtempSync(join(tmpdir(), "claude-home-"));
  homes.push(home);
  return home;
}

/** One headless `claude -p` turn, in `home` (a fresh directory by default): its HOME and working directory. */
async function claude(
  apiKey: string,
  args: string[],
  { env = {}, home = freshHome() }: { env?: Record<string, string>; home?: string } = {},
): Promise<ClaudeRun> {
  const child = spawn(CLAUDE, ["-p", ...args], {
    cwd: home,
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: home,
      ANTHROPIC_BASE_URL: system.url,
      ANTHROPIC_AUTH_TOKEN: apiKey,
      // CI reaches no Anthropic host: no telemetry, error reports, update checks or release notes.
      // Its retries are left as shipped: a retried request would show in the counts below.
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  return { code, stdout, output: `${stdout}\n${stderr}`.slice(-4000), cwd: home };
}

interface Usage {
  usage_30d: { total_requests: number };
}

describe.skipIf(missing !== undefined)(`Claude Code ${PINNED} (claude -p, Messages API)`, () => {
  it("answers a text turn with its default models, exits 0, and is billed once", async () => {
    const { apiKey } = await signUp(system.url);
    const run = await claude(apiKey, ["Say hello in five words."]);
    expect(run.code, run.output).toBe(0);
    expect(run.stdout.trim().length, run.output).toBeGreaterThan(0);
    const usage = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests >= 1);
    expect(usage.usage_30d.total_requests).toBe(1);
  }, 120_000);

  it("runs its Write tool when the demo model calls it, sends the result back and ends the turn", async () => {
    const { apiKey } = await signUp(system.url);
    const home = freshHome();
    const file = join(home, "hello.txt");
    const call = JSON.stringify({ file_path: file, content: "hello from the demo model\n" });
    // Its models named as its users may name them; acceptEdits lets it write in its working directory.
    const run = await claude(apiKey, [`call Write ${call}`, "--permission-mode", "acceptEdits"], {
      home,
      env: { ANTHROPIC_MODEL: "demo-agent", ANTHROPIC_DEFAULT_HAIKU_MODEL: "demo-agent" },
    });
    expect(run.code, run.output).toBe(0);
    expect(readFileSync(file, "utf8")).toBe("hello from the demo model\n");
    expect(run.stdout.trim().length, run.output).toBeGreaterThan(0);
    // Two requests: the call, then the answer to its result.
    const usage = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests >= 2);
    expect(usage.usage_30d.total_requests).toBe(2);
  }, 120_000);

  it("reports in --output-format json the tokens our generation lookup has; its cost is its own estimate", async () => {
    const { apiKey } = await signUp(system.url);
    // --verbose makes the JSON the whole transcript, the result last: its messages carry their ids.
    const run = await claude(apiKey, ["Say hello in five words.", "--output-format", "json", "--verbose"]);
    expect(run.code, run.output).toBe(0);
    const transcript = JSON.parse(run.stdout) as Array<Record<string, any>>; // eslint-disable-line @typescript-eslint/no-explicit-any
    const result = transcript.find((m) => m.type === "result") as ClaudeResult;
    expect(result.is_error, run.output).toBe(false);
    // The Message's id is msg_<our request id>: its generation is the request's record.
    const ids = new Set(transcript.filter((m) => m.type === "assistant").map((m) => m.message.id as string));
    expect(ids.size, run.output).toBe(1);
    const requestId = [...ids][0]!.replace(/^msg_/, "");
    const generation = await settledGeneration(apiKey, requestId);
    expect(generation.model).toBe("demo-agent");
    // Messages' input_tokens count the fresh input only, cache_read_input_tokens the cached part.
    expect({
      input: result.usage.input_tokens + result.usage.cache_read_input_tokens,
      cached: result.usage.cache_read_input_tokens,
      output: result.usage.output_tokens,
    }).toEqual({ input: generation.input_tokens, cached: generation.cached_tokens, output: generation.output_tokens });
    expect(result.usage.cache_creation_input_tokens).toBe(0);
    // total_cost_usd is Claude Code's estimate from its own price table for the model it asked
    // for (an Opus), not our charge: what we charged is the generation's cost_usd.
    expect(generation.cost_usd).toBeGreaterThan(0);
    expect(result.total_cost_usd).not.toBe(generation.cost_usd);
  }, 120_000);
});

/** GET /v1/generations/{id} once the request is settled (settlement is asynchronous). */
async function settledGeneration(apiKey: string, id: string): Promise<Generation> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const res = await fetch(`${system.url}/v1/generations/${id}`, { headers: { authorization: `Bearer ${apiKey}` } });
    if (res.ok) return (await res.json()) as Generation;
    if (Date.now() > deadline) throw new Error(`no generation ${id}: ${res.status} ${await res.text()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
