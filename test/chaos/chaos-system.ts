import { randomBytes } from "node:crypto";
import { randomToken } from "@mkt/runtime/ids";
import { freshEventsPrefix } from "@mkt/testkit/env";
import { answers } from "@mkt/testkit/local-servers";
import { startPrivateNatsServer } from "@mkt/testkit/nats-server";
import { freePort } from "@mkt/testkit/ports";
import { startPrivatePostgres } from "@mkt/testkit/postgres-server";
import { freshServiceDatabases } from "@mkt/testkit/service-databases";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { startChild, waitForReady, type Child } from "../e2e/child-process.ts";
import type { RunningSystem } from "../e2e/system.ts";
import { faultLeaseEnv } from "../faults/fault-checks.ts";
import { startModelProcess, type ModelProcess } from "../faults/model-process.ts";
import { pidListeningOn, processTree, signalAll } from "./process-signals.ts";

/** One process of the system, crashed, frozen and brought back at the chaos run's will. */
export interface ChaosProcess {
  name: string;
  /** A crash: SIGKILL (PostgreSQL: an immediate shutdown, no checkpoint), and waits until it is gone. */
  kill(): Promise<void>;
  /** Starts it again on the same ports and state, and waits until it serves. */
  start(): Promise<void>;
  /** SIGSTOP of the process (and its children): connections stay open and go silent. */
  pause(): void;
  /** SIGCONT of what `pause` stopped. */
  resume(): void;
}

export interface ChaosSystem {
  system: RunningSystem;
  /** Every process, in the order they were started. */
  processes: ChaosProcess[];
  /** The local model's upstream name (platform traffic) and the hoster's server (its own model). */
  model: ModelProcess;
  hosterServer: ModelProcess;
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Pauses and resumes whatever listens on `port` then, with its children. */
function freezer(port: () => number) {
  let frozen: number[] = [];
  return {
    pause() {
      const pid = pidListeningOn(port());
      frozen = pid === undefined ? [] : processTree(pid);
      signalAll(frozen, "SIGSTOP");
    },
    resume() {
      signalAll(frozen, "SIGCONT");
      frozen = [];
    },
  };
}

/** A Node service from its `main.ts`, ready when `${readyUrl}/readyz` says so. */
function nodeService(name: string, entry: string, env: Record<string, string>, readyUrl: string): ChaosProcess {
  let child: Child | undefined;
  let frozen = false;
  const killOnExit = () => child?.process.kill("SIGKILL");
  process.once("exit", killOnExit);
  return {
    name,
    async start() {
      child = startChild(entry, env);
      await waitForReady(readyUrl, child, 60_000);
    },
    async kill() {
      const running = child;
      if (!running || running.process.exitCode !== null || running.process.signalCode !== null) return;
      running.process.kill("SIGKILL");
      await running.exited;
    },
    pause() {
      frozen = child?.process.kill("SIGSTOP") ?? false;
    },
    resume() {
      if (frozen) child?.process.kill("SIGCONT");
      frozen = false;
    },
  };
}

/** The local model or a hoster's server (hoster-server in demo mode) as a chaos process. */
function modelService(name: string, model: ModelProcess): ChaosProcess {
  const port = Number(new URL(model.url).port);
  return { name, kill: () => model.kill(), start: () => model.start(), ...freezer(() => port) };
}

/**
 * The whole system as separate processes, each of which a chaos run may crash or freeze: a
 * PostgreSQL and a nats-server of its own, accounts, registry, billing and two edges (or `edges`;
 * each its real `main.ts`, as deployed: a kill is a real crash, with no shutdown and no final
 * report), the local model that platform keys reach and a hoster's server. The leases are the
 * fault tests' unless `leases` says otherwise (faultLeaseEnv: the product's 2 s TTL, and releases
 * that come within the run). Ports are chosen once, so a restarted process is found where it was.
 */
export async function startChaosSystem(options: {
  billing?: Record<string, string>;
  /**
   * The lease settings of accounts (`ttl`), billing and the edges: the fault tests' by default;
   * `{ ttl: {}, billing: {}, edge: {} }` for the product's defaults.
   */
  leases?: { ttl: Record<string, string>; billing: Record<string, string>; edge: Record<string, string> };
  /** How many edges (two by default). */
  edges?: number;
  /** The demo models' pace: slow enough that a kill cuts answers mid-stream. */
  modelEnv?: Record<string, string>;
  /** The hoster's server's own, over `modelEnv` (the local model keeps that). */
  hosterEnv?: Record<string, string>;
  hosterModelId: string;
}): Promise<ChaosSystem> {
  const postgres = await startPrivatePostgres();
  const databases = await freshServiceDatabases(postgres.url);
  const nats = await startPrivateNatsServer();
  const closers: Array<() => Promise<void>> = [() => postgres.close(), () => nats.close()];
  const close = async () => {
    for (const closeOne of closers) await closeOne().catch(() => undefined);
  };
  try {
    const model = await startModelProcess(options.modelEnv);
    closers.unshift(() => model.close());
    const hosterServer = await startModelProcess({
      ...options.modelEnv,
      ...options.hosterEnv,
      DEMO_MODELS: options.hosterModelId,
    });
    closers.unshift(() => hosterServer.close());
    const certs = await testCertificates();
    const eventsPrefix = freshEventsPrefix();
    const adminToken = randomToken(24);
    const secretsKey = randomBytes(32).toString("hex");
    const addr = (port: number) => `127.0.0.1:${port}`;
    const ports = {
      accounts: [await freePort(), await freePort()] as const,
      registry: [await freePort(), await freePort()] as const,
      billing: [await freePort(), await freePort()] as const,
      edges: await Promise.all(Array.from({ length: options.edges ?? 2 }, () => freePort())),
    };
    const leases = options.leases ?? faultLeaseEnv;
    const service = (name: "accounts" | "registry" | "billing", more: Record<string, string>) => {
      const [grpc, metrics] = ports[name];
      return nodeService(
        name,
        `services/${name}/src/main.ts`,
        {
          NATS_URL: nats.url,
          EVENTS_PREFIX: eventsPrefix,
          GRPC_PORT: String(grpc),
          METRICS_PORT: String(metrics),
          DATABASE_URL: databases.services[name].url,
          MIGRATE_DATABASE_URL: databases.services[name].migrateUrl,
          ...certs.env(name),
          ...more,
        },
        `http://${addr(metrics)}`,
      );
    };
    const accounts = service("accounts", leases.ttl);
    const registry = service("registry", {
      ACCOUNTS_ADDR: addr(ports.accounts[0]),
      LOCAL_MODEL_URL: model.url,
      LOCAL_MODEL_TOKEN: model.token,
      SECRETS_KEY: secretsKey,
      // The hoster's server listens on loopback.
      ALLOW_PRIVATE_UPSTREAMS: "true",
    });
    const billing = service("billing", {
      ACCOUNTS_ADDR: addr(ports.accounts[0]),
      REGISTRY_ADDR: addr(ports.registry[0]),
      SECRETS_KEY: secretsKey,
      ...leases.billing,
      ...options.billing,
    });
    const edgeUrls = ports.edges.map((port) => `http://${addr(port)}`);
    // Every edge its own EDGE_ID: with one, each would take the other's incarnation.
    const edges = ports.edges.map((port, index) =>
      nodeService(
        `edge-${index}`,
        "edge/src/main.ts",
        {
          ...certs.env("edge"),
          EDGE_ID: `chaos-edge-${index}`,
          HOST: "127.0.0.1",
          PORT: String(port),
          NATS_URL: nats.url,
          EVENTS_PREFIX: eventsPrefix,
          ACCOUNTS_ADDR: addr(ports.accounts[0]),
          BILLING_ADDR: addr(ports.billing[0]),
          REGISTRY_ADDR: addr(ports.registry[0]),
          ADMIN_TOKEN: adminToken,
          ALLOW_PRIVATE_UPSTREAMS: "true",
          ...leases.edge,
        },
        edgeUrls[index]!,
      ),
    );
    // Started in the order they call each other; killed in reverse at the end (the edges first).
    for (const one of [accounts, registry, billing, ...edges]) {
      closers.unshift(() => one.kill());
      await one.start();
    }
    const natsPort = Number(new URL(nats.url).port);
    const processes: ChaosProcess[] = [
      {
        name: "postgres",
        kill: () => postgres.stop("immediate"),
        start: () => postgres.start(),
        ...freezer(() => postgres.port),
      },
      {
        name: "nats",
        async kill() {
          const pid = pidListeningOn(natsPort);
          if (pid !== undefined) process.kill(pid, "SIGKILL");
          while (await answers("127.0.0.1", natsPort, 200)) await sleep(20);
          // The launcher forgets its child on the exit event; start() before that would do nothing.
          await sleep(200);
        },
        async start() {
          for (let tries = 0; !(await answers("127.0.0.1", natsPort, 200)); tries++) {
            if (tries === 50) throw new Error("nats-server did not come back");
            await nats.start();
            await sleep(100);
          }
        },
        ...freezer(() => natsPort),
      },
      accounts,
      registry,
      billing,
      ...edges,
      modelService("model", model),
      modelService("hoster-server", hosterServer),
    ];
    const system: RunningSystem = {
      url: edgeUrls[0]!,
      urls: edgeUrls,
      databaseUrl: databases.databaseUrl,
      eventsPrefix,
      adminToken,
      readyzUrls: {
        accounts: `http://${addr(ports.accounts[1])}/readyz`,
        billing: `http://${addr(ports.billing[1])}/readyz`,
        registry: `http://${addr(ports.registry[1])}/readyz`,
      },
      grpcAddresses: {
        accounts: addr(ports.accounts[0]),
        billing: addr(ports.billing[0]),
        registry: addr(ports.registry[0]),
      },
      renewSubscriptions: () => Promise.reject(new Error("billing runs as its own process here")),
      foldRollups: () => Promise.reject(new Error("billing runs as its own process here")),
      verifyNow: () => Promise.reject(new Error("registry runs as its own process here")),
      close,
    };
    // Roles are cluster-wide; the cluster goes with the run, but drop them as every test does.
    closers.splice(closers.length - 2, 0, () => databases.dropRoles());
    return { system, processes, model, hosterServer, close };
  } catch (err) {
    await close();
    throw err;
  }
}
