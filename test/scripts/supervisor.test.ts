import { mkdtempSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, expect, it } from "vitest";
import { Supervisor } from "../../scripts/lib/supervisor.ts";

// The supervisor `npm start` runs, with real child processes (fixtures/stoppable-child.ts).

const root = join(import.meta.dirname, "../..");
// A folder per test run (a retry starts with no events or log lines of the attempt before).
const freshDir = () => mkdtempSync(join(tmpdir(), "supervisor-test-"));
let running: Supervisor | undefined;
afterEach(async () => {
  await running?.stop();
  running = undefined;
});

function supervise(dir: string, names: string[], stopOrder: string[][], stopDelayMs = 0) {
  const lines: string[] = [];
  const events = join(dir, "events");
  const logDir = join(dir, "logs");
  const supervisor = new Supervisor({ root, logDir, stopOrder, report: (l) => lines.push(l) });
  running = supervisor;
  for (const name of names) {
    supervisor.start({
      name,
      entry: "test/scripts/fixtures/stoppable-child.ts",
      env: { CHILD_NAME: name, EVENTS_FILE: events, STOP_DELAY_MS: String(stopDelayMs) },
    });
  }
  return { supervisor, lines, events, logDir };
}

const eventsOf = (file: string) =>
  existsSync(file)
    ? readFileSync(file, "utf8")
        .trim()
        .split("\n")
        .map((line) => line.split(" ") as [string, string, string])
    : [];

async function until<T>(what: string, probe: () => T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

it("restarts a child killed with SIGKILL and says which, why and its last log lines", async () => {
  const { supervisor, lines, events, logDir } = supervise(freshDir(), ["accounts", "billing"], []);
  const first = await until("billing to start", () => supervisor.child("billing")?.pid);
  const billingLog = join(logDir, "billing.log");
  await until("billing's first line in its log", () =>
    existsSync(billingLog) && readFileSync(billingLog, "utf8").includes("billing: serving") ? true : undefined,
  );

  process.kill(first, "SIGKILL");

  const line = await until("the restart line", () => lines.find((l) => l.startsWith("↻")));
  expect(line).toMatch(/^↻ billing killed by SIGKILL after [\d.]+ s; restarting in 1\.0 s\./);
  expect(line).toContain("billing: serving");
  const again = await until("billing to start again", () =>
    eventsOf(events).find(([name, what, pid]) => name === "billing" && what === "started" && pid !== String(first)),
  );
  expect(supervisor.child("billing")?.pid).toBe(Number(again[2]));
  // The other child was left alone.
  expect(eventsOf(events).filter(([name]) => name === "accounts")).toHaveLength(1);
});

it("backs off: a child that keeps crashing is restarted later each time", async () => {
  const { supervisor, lines, events } = supervise(freshDir(), ["registry"], []);
  for (let crash = 1; crash <= 2; crash++) {
    const pid = await until("registry to run", () => supervisor.child("registry")?.pid);
    await until("registry's start", () => (eventsOf(events).some(([, , p]) => p === String(pid)) ? true : undefined));
    process.kill(pid, "SIGKILL");
    await until(`restart line ${crash}`, () => (lines.length >= crash ? true : undefined));
  }
  expect(lines[0]).toContain("restarting in 1.0 s");
  expect(lines[1]).toContain("restarting in 2.0 s");
});

it("stops stage by stage: each stage starts stopping only when the one before has exited", async () => {
  const stopOrder = [["edge"], ["registry"], ["billing", "accounts"], ["local-model"]];
  const { supervisor, lines, events } = supervise(
    freshDir(),
    ["local-model", "accounts", "billing", "registry", "edge"],
    stopOrder,
    300,
  );
  await until("every child to start", () => (eventsOf(events).length === 5 ? true : undefined));

  await supervisor.stop();
  running = undefined;

  const stops = eventsOf(events).filter(([, what]) => what !== "started");
  const at = (name: string, what: string) => stops.findIndex(([n, w]) => n === name && w === what);
  for (let i = 1; i < stopOrder.length; i++) {
    const lastExitBefore = Math.max(...stopOrder[i - 1]!.map((name) => at(name, "exited")));
    const firstTermHere = Math.min(...stopOrder[i]!.map((name) => at(name, "SIGTERM")));
    expect(lastExitBefore, `${stopOrder[i - 1]} exited before ${stopOrder[i]} got SIGTERM`).toBeLessThan(firstTermHere);
  }
  // One stage's processes stop together.
  expect(Math.max(at("billing", "SIGTERM"), at("accounts", "SIGTERM"))).toBeLessThan(
    Math.min(at("billing", "exited"), at("accounts", "exited")),
  );
  expect(lines).toEqual([
    "■ stopped edge",
    "■ stopped registry",
    "■ stopped billing, accounts",
    "■ stopped local-model",
  ]);
});
