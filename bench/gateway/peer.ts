/**
 * The peer: Portkey's open-source AI gateway (@portkey-ai/gateway, pinned in bench/peer, outside
 * the product's dependencies), run headless as its own process and pointed at the same upstream
 * through its OpenAI provider with a custom host.
 */
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { createWriteStream, existsSync } from "node:fs";
import { join } from "node:path";
import { waitForHttp } from "../../scripts/lib/processes.ts";

export function ensurePeerInstalled(root: string): void {
  const dir = join(root, "bench/peer");
  if (existsSync(join(dir, "node_modules/@portkey-ai/gateway/build/start-server.js"))) return;
  console.log("installing the peer (npm ci --prefix bench/peer) …");
  execFileSync("npm", ["ci", "--prefix", dir, "--no-audit", "--no-fund"], { stdio: "inherit" });
}

export interface Peer {
  url: string;
  pid: number | undefined;
  stop(): Promise<void>;
}

export async function startPeer(root: string, port: number, logDir: string): Promise<Peer> {
  const entry = join(root, "bench/peer/node_modules/@portkey-ai/gateway/build/start-server.js");
  const log = createWriteStream(join(logDir, "peer.log"), { flags: "a" });
  const child: ChildProcess = spawn(process.execPath, [entry, "--headless", `--port=${port}`], {
    cwd: join(root, "bench/peer"),
    env: process.env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout!.pipe(log);
  child.stderr!.pipe(log);
  const url = `http://127.0.0.1:${port}`;
  // GET / answers "AI Gateway says hey!" once it listens.
  if (!(await waitForHttp(`${url}/`, 30_000))) {
    child.kill("SIGKILL");
    throw new Error(`the peer did not start; see ${join(logDir, "peer.log")}`);
  }
  return {
    url,
    pid: child.pid,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      child.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
      if (child.exitCode === null) child.kill("SIGKILL");
    },
  };
}
