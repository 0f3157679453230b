import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { renderNatsJetStreamBlock } from "@mkt/runtime/nats-server-config";
import { answers, findNatsServer, natsServerSyncsEveryWrite } from "./local-servers.ts";
import { freePort } from "./ports.ts";

/** One nats-server of a test's cluster. */
export interface NatsClusterNode {
  /** Its `server_name`: what JetStream's stream info names as a stream's leader. */
  name: string;
  url: string;
  /** True while its process runs. */
  readonly running: boolean;
  /** SIGKILL: no lame-duck mode, no goodbye to its routes, as a lost machine. Resolves once it exited. */
  kill(): Promise<void>;
}

export interface NatsCluster {
  nodes: NatsClusterNode[];
  /** Every node's URL, comma-separated: a NATS_URL the services connect with (connectNats splits it). */
  url: string;
  /** Whether the nodes sync every write to disk before acking it (nats-server 2.10 and later). */
  syncEveryWrite: boolean;
  /** Kills every node and removes their stores. */
  close(): Promise<void>;
}

/**
 * Starts `size` nats-server processes as one JetStream cluster: client and route ports on
 * loopback, each node routed to every other, each with a JetStream store of its own in a temporary
 * folder and, where the binary knows it, `sync_interval: always` (renderNatsJetStreamBlock, as
 * compose's server). Resolves once JetStream answers, i.e. the nodes elected their meta leader.
 */
export async function startNatsCluster(size = 3): Promise<NatsCluster> {
  const binary = findNatsServer();
  if (!binary) throw new Error("nats-server is not installed (apt-get install nats-server)");
  const syncEveryWrite = natsServerSyncsEveryWrite(binary);
  const home = mkdtempSync(join(tmpdir(), "mkt-nats-cluster-"));
  const ports = await Promise.all(Array.from({ length: size }, async () => [await freePort(), await freePort()]));
  const routes = ports.map(([, clusterPort]) => `nats-route://127.0.0.1:${clusterPort}`);
  const children: Array<ChildProcess | undefined> = [];
  const stderrs: string[] = [];
  const nodes = ports.map(([port, clusterPort], index): NatsClusterNode => {
    const name = `n${index + 1}`;
    const store = join(home, name);
    mkdirSync(store);
    const configPath = join(home, `${name}.conf`);
    writeFileSync(
      configPath,
      [
        `server_name: ${name}`,
        `listen: 127.0.0.1:${port}`,
        renderNatsJetStreamBlock({ storeDir: store, syncEveryWrite }),
        `cluster {`,
        `  name: mkt-test`,
        `  listen: 127.0.0.1:${clusterPort}`,
        `  routes: [${routes.map((route) => JSON.stringify(route)).join(", ")}]`,
        `}`,
        ``,
      ].join("\n"),
    );
    stderrs[index] = "";
    const child = spawn(binary, ["-c", configPath], { stdio: ["ignore", "ignore", "pipe"] });
    child.stderr?.on("data", (part: Buffer) => (stderrs[index] = (stderrs[index] + part.toString()).slice(-2_000)));
    child.once("exit", () => (children[index] = undefined));
    children[index] = child;
    return {
      name,
      url: `nats://127.0.0.1:${port}`,
      get running() {
        return children[index] !== undefined;
      },
      async kill() {
        const running = children[index];
        if (!running) return;
        const exited = new Promise<void>((resolve) => running.once("exit", () => resolve()));
        running.kill("SIGKILL");
        await exited;
      },
    };
  });
  const killAll = () => children.forEach((child) => child?.kill("SIGKILL"));
  // A test process that dies without close() must not leave the servers running.
  process.once("exit", killAll);
  const close = async () => {
    process.off("exit", killAll);
    await Promise.all(nodes.map((node) => node.kill()));
    rmSync(home, { recursive: true, force: true });
  };
  try {
    await untilJetStreamAnswers(nodes, stderrs);
  } catch (err) {
    await close();
    throw err;
  }
  return { nodes, url: nodes.map((node) => node.url).join(","), syncEveryWrite, close };
}

/** Waits for every node to listen, then for JetStream to answer through the cluster. */
async function untilJetStreamAnswers(nodes: NatsClusterNode[], stderrs: string[], timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (const [index, node] of nodes.entries()) {
    const port = Number(new URL(node.url).port);
    while (!(await answers("127.0.0.1", port))) {
      if (!node.running || Date.now() > deadline) {
        throw new Error(`nats-server ${node.name} did not start: ${stderrs[index]}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  const nc = await connect({ servers: nodes.map((node) => node.url) });
  try {
    const jsm = await jetstreamManager(nc, { timeout: 2_000, checkAPI: false });
    for (;;) {
      try {
        await jsm.getAccountInfo();
        return;
      } catch (err) {
        if (Date.now() > deadline)
          throw new Error(`the cluster's JetStream did not come up: ${String(err)}`, { cause: err });
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  } finally {
    await nc.close();
  }
}
