import { spawn, type ChildProcess } from "node:child_process";
import { randomToken } from "@mkt/runtime/ids";
import { freePort } from "@mkt/testkit/ports";
import { answers } from "@mkt/testkit/local-servers";

/** The local model (hoster-server in demo mode) as a process of its own, killed and restarted at will. */
export interface ModelProcess {
  url: string;
  token: string;
  /** kill -9: streams in flight are cut mid-answer, as when the machine or the process dies. */
  kill(): Promise<void>;
  /** Starts it again on the same port and waits until it accepts connections. */
  start(): Promise<void>;
  close(): Promise<void>;
}

export async function startModelProcess(env: Record<string, string> = {}): Promise<ModelProcess> {
  const port = await freePort();
  const token = randomToken(24);
  let child: ChildProcess | undefined;

  async function start(): Promise<void> {
    if (child) return;
    const started = spawn(process.execPath, ["hoster-server/src/main.ts"], {
      stdio: ["ignore", "ignore", "inherit"],
      env: {
        ...process.env,
        HOST: "127.0.0.1",
        PORT: String(port),
        HOSTER_SERVER_TOKEN: token,
        LOG_LEVEL: "warn",
        ...env,
      },
    });
    child = started;
    started.once("exit", () => {
      if (child === started) child = undefined;
    });
    for (const deadline = Date.now() + 15_000; !(await answers("127.0.0.1", port));) {
      if (!child || Date.now() > deadline) throw new Error(`the model server did not start on port ${port}`);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  async function kill(): Promise<void> {
    const running = child;
    if (!running) return;
    const exited = new Promise((resolve) => running.once("exit", resolve));
    running.kill("SIGKILL");
    await exited;
  }

  const killOnExit = () => child?.kill("SIGKILL");
  process.once("exit", killOnExit);
  await start();
  return {
    url: `http://127.0.0.1:${port}`,
    token,
    kill,
    start,
    async close() {
      process.off("exit", killOnExit);
      await kill();
    },
  };
}
