import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
// The launcher's own helpers: its lookup of the binary (PATH, then sbin, where Debian installs
// it) and its check that a port accepts connections.
import { answers, findNatsServer } from "./local-servers.ts";
import { freePort } from "./ports.ts";

/** A nats-server of a test's own: stop and start it at will, never the machine's shared one. */
export interface PrivateNatsServer {
  /** nats://127.0.0.1:<port>; the same across restarts, so clients reconnect to it. */
  url: string;
  port: number;
  /** Stops the server (SIGTERM, then SIGKILL after 5 s); its JetStream store stays. */
  stop(): Promise<void>;
  /** Starts it again on the same port and store, and waits until it accepts connections. */
  start(): Promise<void>;
  /** Stops it and removes its store. */
  close(): Promise<void>;
}

export interface PrivateNatsServerOptions {
  /**
   * A nats-server configuration file's text (users and permissions: renderNatsServerConfig);
   * the address, port, JetStream and store flags still come from here. Without it: no auth.
   */
  config?: string;
  /** Variables the configuration reads from the server's environment (its users' passwords). */
  env?: Record<string, string>;
}

/**
 * Starts a nats-server with JetStream on a free loopback port and a store directory of its own,
 * for fault tests that stop NATS for a while and for tests of its permissions. Each
 * call is a separate server.
 */
export async function startPrivateNatsServer(options: PrivateNatsServerOptions = {}): Promise<PrivateNatsServer> {
  const binary = findNatsServer();
  if (!binary) throw new Error("nats-server is not installed (apt-get install nats-server)");
  const port = await freePort();
  const store = mkdtempSync(join(tmpdir(), "mkt-nats-"));
  // Beside the store, not in it: the server owns what is under its store directory.
  const configDir = options.config === undefined ? undefined : mkdtempSync(join(tmpdir(), "mkt-nats-conf-"));
  const configArgs: string[] = [];
  if (configDir) {
    const path = join(configDir, "nats-server.conf");
    writeFileSync(path, options.config!, { mode: 0o600 });
    configArgs.push("-c", path);
  }
  let child: ChildProcess | undefined;

  async function start(): Promise<void> {
    if (child) return;
    const args = [...configArgs, "-a", "127.0.0.1", "-p", String(port), "-js", "-sd", store];
    const started = spawn(binary!, args, {
      stdio: ["ignore", "ignore", "pipe"],
      env: { ...process.env, ...options.env },
    });
    let stderr = "";
    started.stderr?.on("data", (part: Buffer) => (stderr = (stderr + part.toString()).slice(-2_000)));
    child = started;
    started.once("exit", () => {
      if (child === started) child = undefined;
    });
    const deadline = Date.now() + 10_000;
    while (!(await answers("127.0.0.1", port))) {
      if (!child || Date.now() > deadline) {
        await stop();
        throw new Error(`private nats-server did not start on port ${port}: ${stderr}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  async function stop(): Promise<void> {
    const running = child;
    if (!running) return;
    const exited = new Promise<void>((resolve) => running.once("exit", () => resolve()));
    running.kill("SIGTERM");
    const kill = setTimeout(() => running.kill("SIGKILL"), 5_000);
    await exited;
    clearTimeout(kill);
    child = undefined;
  }

  // A test process that dies without close() must not leave the server running.
  const killOnExit = () => child?.kill("SIGKILL");
  process.once("exit", killOnExit);
  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    stop,
    start,
    async close() {
      process.off("exit", killOnExit);
      await stop();
      rmSync(store, { recursive: true, force: true });
      if (configDir) rmSync(configDir, { recursive: true, force: true });
    },
  };
}
