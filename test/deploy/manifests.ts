/**
 * Readers for the deployment files (docker-compose.yml, deploy/) and for what they must agree
 * with: the processes scripts/start.ts launches and the environment each process's config loader
 * requires. Used by deploy.test.ts; nothing here talks to Docker or a cluster.
 */
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parse, parseAllDocuments } from "yaml";

export const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const read = (path: string) => readFileSync(join(root, path), "utf8");
export const exists = (path: string) => existsSync(join(root, path));

export type Env = Record<string, string>;

// ---------------------------------------------------------------------------------------------
// The processes (scripts/start.ts is the one list of them)

export interface Process {
  /** The launcher's name, also the compose service and the Kubernetes Deployment. */
  name: string;
  /** The file `node` runs, relative to the repository root. */
  entry: string;
}

/**
 * Processes `npm start` runs for a local demo only: the demo hoster is an independent hoster's
 * server that the launcher registers itself. A deployment's hosters run their own servers and
 * register them, so compose and Kubernetes have no such process.
 */
const LOCAL_DEMO_ONLY = new Set(["demo-hoster", "demo-hoster-2"]);

/** The processes a deployment runs, as `npm start` starts them (scripts/start.ts). */
export function launcherProcesses(): Process[] {
  const source = read("scripts/start.ts");
  return [...source.matchAll(/name:\s*"([^"]+)",\s*entry:\s*"([^"]+)"/g)]
    .map(([, name, entry]) => ({ name: name!, entry: entry! }))
    .filter((process) => !LOCAL_DEMO_ONLY.has(process.name));
}

/** A gRPC backend service (services/<name>), as opposed to an HTTP process. */
export const isGrpcService = (p: Process) => p.entry.startsWith("services/");

// ---------------------------------------------------------------------------------------------
// Config loaders: what each process requires, and which variables it reads at all

type Loader = (env: NodeJS.ProcessEnv) => Record<string, unknown>;

export interface ProcessConfig {
  /** Variables with no default: the process refuses to start without them. */
  required: string[];
  /** Every variable the process reads (a set value not in here is a typo or dead config). */
  known: Set<string>;
  /** Validates an environment exactly as the process would at start; throws naming variables. */
  validate(env: Env): void;
  /** The settings the process would start with (its loader's result; the environment itself without one). */
  load(env: Env): Record<string, unknown>;
  /** Where the lists came from. */
  source: string;
}

/**
 * The process's own loader (`load…Config` exported by the config.ts beside its entry), or, when
 * that file does not exist yet, its table in docs/configuration.md (rows whose default is
 * "required").
 */
export async function processConfig(process: Process): Promise<ProcessConfig> {
  const path = join(dirname(process.entry), "config.ts");
  if (!exists(path)) return documentedConfig(process);
  const module = (await import(pathToFileURL(join(root, path)).href)) as Record<string, unknown>;
  const loaders = Object.entries(module).filter(([name, value]) => /^load\w*Config$/.test(name) && value);
  if (loaders.length !== 1) throw new Error(`${path} should export one load…Config function`);
  const load = loaders[0]![1] as Loader;
  let required: string[] = [];
  try {
    load({});
  } catch (err) {
    required = [...String((err as Error).message).matchAll(/^\s+([A-Z][A-Z0-9_]*):/gm)].map((m) => m[1]!);
  }
  const complete = Object.fromEntries(required.map((name) => [name, placeholder(name)]));
  return {
    required,
    known: new Set(Object.keys(load(complete))),
    validate: (env) => void load(env),
    load: (env) => load(env) as Record<string, unknown>,
    source: path,
  };
}

function documentedConfig(process: Process): ProcessConfig {
  const rows = docsTable(process.name);
  const shared = isGrpcService(process) ? docsTable("Shared by the backend services") : [];
  const all = [...rows, ...shared];
  const required = all.filter((row) => row.required).flatMap((row) => row.names);
  return {
    required,
    known: new Set(all.flatMap((row) => row.names)),
    validate(env) {
      const missing = required.filter((name) => !env[name]);
      if (missing.length > 0) throw new Error(`missing ${missing.join(", ")}`);
    },
    load: (env) => ({ ...env }),
    source: `docs/configuration.md (no ${join(dirname(process.entry), "config.ts")} yet)`,
  };
}

interface DocsRow {
  names: string[];
  required: boolean;
}

/** The variable table under `## <heading>` in docs/configuration.md. */
export function docsTable(heading: string): DocsRow[] {
  const lines = read("docs/configuration.md").split("\n");
  const start = lines.findIndex((line) => line.startsWith("## ") && line.slice(3).startsWith(heading));
  if (start < 0) throw new Error(`docs/configuration.md has no "## ${heading}" section`);
  const rows: DocsRow[] = [];
  for (const line of lines.slice(start + 1)) {
    if (line.startsWith("## ")) break;
    const cells = line.split("|").map((cell) => cell.trim());
    if (cells.length < 4 || !cells[1]!.includes("`") || /^-+$/.test(cells[1]!)) continue;
    rows.push({
      names: [...cells[1]!.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1]!),
      required: cells[2] === "required",
    });
  }
  return rows;
}

/**
 * A stand-in for a secret the operator supplies: a URL for `*_URL` (DATABASE_URL carries its
 * password), a letter then hex for NATS passwords (the form docs/deploy.md generates), else 32
 * random bytes in hex, which every other secret validator accepts.
 */
export const placeholder = (name: string) => {
  const secret = randomBytes(32).toString("hex");
  if (name.endsWith("_URL")) return `postgres://operator:${secret}@db.example.net:5432/marketplace`;
  return /^NATS_\w*PASSWORD$/.test(name) ? `n${secret}` : secret;
};

/**
 * A gRPC address variable's host, port and resolver: `host:port` (grpc-js's default, DNS) or
 * `dns:///host:port` (DNS too, spelled out as the manifests do). Other URLs (`http://…`) as URLs.
 */
export function addressParts(value: string): { scheme: string; host: string; port: string } {
  const dns = /^dns:\/\/\/([^:/]+):([0-9]+)$/.exec(value);
  if (dns) return { scheme: "dns", host: dns[1]!, port: dns[2]! };
  const url = new URL(value.includes("://") ? value : `grpc://${value}`);
  return { scheme: url.protocol.slice(0, -1), host: url.hostname, port: url.port };
}

/** Names whose values are secrets: they must never be written into a committed file. */
export const isSecretName = (name: string) => /(TOKEN|SECRET|PASSWORD|_KEY)$/.test(name);

// ---------------------------------------------------------------------------------------------
// docker-compose.yml

export interface ComposeService {
  image?: string;
  restart?: string;
  profiles?: string[];
  build?: { context: string; dockerfile: string };
  command?: string[];
  environment?: Record<string, string | number | boolean | null>;
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test: string[] };
  ports?: string[];
  volumes?: string[];
  read_only?: boolean;
  networks?: Record<string, { ipv4_address?: string } | null>;
}

export interface Compose {
  services: Record<string, ComposeService>;
  volumes?: Record<string, unknown>;
}

export const compose = (): Compose => parse(read("docker-compose.yml"), { merge: true }) as Compose;

/** `${NAME:?message}`, `${NAME:-default}`, `${NAME}` as compose reads them. */
const INTERPOLATION = /\$\{([A-Z_][A-Z0-9_]*)(?:(:\?|:-)([^}]*))?\}/g;

/** Every variable the file requires from the operator's environment (`${NAME:?...}`), comments aside. */
export function requiredComposeVariables(text: string): string[] {
  const values = JSON.stringify(parse(text));
  return [...new Set([...values.matchAll(INTERPOLATION)].filter((m) => m[2] === ":?").map((m) => m[1]!))];
}

/** The operator's environment as docs/deploy.md asks for it: every required variable set. */
export const operatorVariables = (): Env =>
  Object.fromEntries(requiredComposeVariables(read("docker-compose.yml")).map((name) => [name, placeholder(name)]));

/** A compose value with its `${...}` references replaced from `vars` (defaults where unset). */
export function interpolate(value: string, vars: Env): string {
  return value.replace(INTERPOLATION, (_all, name: string, op: string | undefined, arg: string | undefined) => {
    const set = vars[name];
    if (set !== undefined && set !== "") return set;
    if (op === ":-") return arg ?? "";
    if (op === ":?") throw new Error(`required variable ${name} is missing: ${arg}`);
    return "";
  });
}

/** A service's environment as its process will see it, given the operator's variables. */
export function composeEnv(service: ComposeService, vars: Env): Env {
  return Object.fromEntries(
    Object.entries(service.environment ?? {}).map(([name, value]) => [name, interpolate(String(value ?? ""), vars)]),
  );
}

// ---------------------------------------------------------------------------------------------
// deploy/k8s/base

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
  stringData?: Record<string, string>;
}

export interface Container {
  name: string;
  image: string;
  command?: string[];
  args?: string[];
  ports?: Array<{ name?: string; containerPort: number }>;
  env?: Array<{
    name: string;
    value?: string;
    valueFrom?: {
      secretKeyRef?: { name: string; key: string };
      configMapKeyRef?: { name: string; key: string };
      fieldRef?: { fieldPath: string };
    };
  }>;
  envFrom?: Array<{ configMapRef?: { name: string }; secretRef?: { name: string } }>;
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  startupProbe?: Probe;
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext?: SecurityContext;
  volumeMounts?: Array<{ name: string; mountPath: string; readOnly?: boolean }>;
}

export interface Probe {
  tcpSocket?: { port: string | number };
  httpGet?: { path: string; port: string | number };
  grpc?: { port: number };
}

export interface SecurityContext {
  runAsNonRoot?: boolean;
  runAsUser?: number;
  readOnlyRootFilesystem?: boolean;
  allowPrivilegeEscalation?: boolean;
  capabilities?: { drop?: string[] };
  seccompProfile?: { type: string };
}

export interface PodSpec {
  securityContext?: SecurityContext;
  initContainers?: Container[];
  containers: Container[];
  volumes?: Array<{ name: string; configMap?: { name: string }; emptyDir?: object; secret?: { secretName: string } }>;
}

export interface Kustomization {
  namespace?: string;
  resources: string[];
  configMapGenerator?: Array<{ name: string; literals?: string[]; files?: string[] }>;
  images?: Array<{ name: string; newName?: string; newTag?: string }>;
}

export const K8S_BASE = "deploy/k8s/base";

export const kustomization = () => parse(read(`${K8S_BASE}/kustomization.yaml`)) as Kustomization;

/** Every object of every resource file the kustomization lists. */
export function k8sObjects(): Array<K8sObject & { file: string }> {
  return kustomization().resources.flatMap((file) =>
    parseAllDocuments(read(`${K8S_BASE}/${file}`)).map((doc) => {
      if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors[0]!.message}`);
      return { ...(doc.toJS() as K8sObject), file };
    }),
  );
}

export const podSpec = (deployment: K8sObject) => (deployment.spec as { template: { spec: PodSpec } }).template.spec;

/** The generated ConfigMaps' literals, by generator name. */
export function configMapLiterals(): Record<string, Env> {
  return Object.fromEntries(
    (kustomization().configMapGenerator ?? []).map((generator) => [
      generator.name,
      Object.fromEntries(
        (generator.literals ?? []).map((literal) => {
          const at = literal.indexOf("=");
          return [literal.slice(0, at), literal.slice(at + 1)];
        }),
      ),
    ]),
  );
}

/**
 * A container's environment as the process will see it: its ConfigMaps' literals, plain values,
 * and a placeholder for each Secret reference (the Secret itself is never committed).
 */
export function containerEnv(container: Container): Env {
  const literals = configMapLiterals();
  const env: Env = {};
  for (const from of container.envFrom ?? []) {
    if (from.configMapRef) Object.assign(env, literals[from.configMapRef.name]);
  }
  for (const entry of container.env ?? []) {
    if (entry.value !== undefined) env[entry.name] = entry.value;
    else if (entry.valueFrom?.secretKeyRef) env[entry.name] = placeholder(entry.valueFrom.secretKeyRef.key);
    else if (entry.valueFrom?.configMapKeyRef) {
      const { name, key } = entry.valueFrom.configMapKeyRef;
      env[entry.name] = literals[name]?.[key] ?? "";
    } else if (entry.valueFrom?.fieldRef)
      env[entry.name] = POD_FIELD_EXAMPLES[entry.valueFrom.fieldRef.fieldPath] ?? "";
  }
  return env;
}

/** What the downward API gives a pod, as a Deployment's pod would have it. */
const POD_FIELD_EXAMPLES: Record<string, string> = {
  "metadata.name": "edge-7d9f8c6b5d-x2x7q",
  "metadata.namespace": "marketplace",
};

/** Kubernetes quantities ("250m", "2", "512Mi", "1Gi") as numbers, to compare requests and limits. */
export function quantity(value: string | number): number {
  const match = /^([0-9.]+)(m|Ki|Mi|Gi|Ti|k|M|G)?$/.exec(String(value));
  if (!match) throw new Error(`not a quantity: ${value}`);
  const scale: Record<string, number> = {
    m: 1e-3,
    k: 1e3,
    M: 1e6,
    G: 1e9,
    Ki: 2 ** 10,
    Mi: 2 ** 20,
    Gi: 2 ** 30,
    Ti: 2 ** 40,
  };
  return Number(match[1]) * (match[2] ? scale[match[2]]! : 1);
}

// ---------------------------------------------------------------------------------------------
// deploy/Dockerfile

export interface DockerStage {
  base: string;
  name: string | undefined;
  instructions: Array<{ keyword: string; args: string }>;
}

/** The Dockerfile's stages and their instructions (continuation lines joined, comments dropped). */
export function dockerStages(text: string): DockerStage[] {
  const logical = text
    .replace(/\\\n/g, " ")
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line !== "" && !line.startsWith("#"));
  const stages: DockerStage[] = [];
  for (const line of logical) {
    const [, keyword, args] = /^(\w+)\s+(.*)$/.exec(line) ?? [];
    if (!keyword) continue;
    if (keyword.toUpperCase() === "FROM") {
      const [, base, name] = /^(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args!) ?? [];
      stages.push({ base: base!, name, instructions: [] });
    } else {
      stages.at(-1)?.instructions.push({ keyword: keyword.toUpperCase(), args: args! });
    }
  }
  return stages;
}

/** A COPY's flags, sources and destination. */
export function copyParts(args: string): { from: string | undefined; sources: string[]; dest: string } {
  const words = args.split(/\s+/);
  const flags = words.filter((word) => word.startsWith("--"));
  const paths = words.filter((word) => !word.startsWith("--"));
  const from = flags.find((flag) => flag.startsWith("--from="))?.slice("--from=".length);
  return { from, sources: paths.slice(0, -1), dest: paths.at(-1)! };
}

/** The workspace directories named by the root package.json (globs expanded one level). */
export function workspaceDirs(): string[] {
  const { workspaces } = JSON.parse(read("package.json")) as { workspaces: string[] };
  return workspaces.flatMap((pattern) => {
    if (!pattern.endsWith("/*")) return [pattern];
    const parent = pattern.slice(0, -2);
    return readdirNames(parent).map((child) => `${parent}/${child}`);
  });
}

function readdirNames(dir: string): string[] {
  if (!exists(dir)) return [];
  return readdirSync(join(root, dir)).filter((child) => exists(`${dir}/${child}/package.json`));
}

// ---------------------------------------------------------------------------------------------
// NetworkPolicies, evaluated as a network plugin enforcing them would

interface PolicyPeer {
  podSelector?: { matchLabels?: Record<string, string> };
  namespaceSelector?: { matchLabels?: Record<string, string> };
  ipBlock?: { cidr: string; except?: string[] };
}
interface PolicyRule {
  from?: PolicyPeer[];
  to?: PolicyPeer[];
  ports?: Array<{ protocol?: string; port: number | string }>;
}
export interface NetworkPolicySpec {
  podSelector: { matchLabels?: Record<string, string> };
  policyTypes: Array<"Ingress" | "Egress">;
  ingress?: PolicyRule[];
  egress?: PolicyRule[];
}

/**
 * One end of a connection: a pod (its namespace's labels and its own) with an address, or an
 * address outside the cluster. Pods in the policies' namespace are governed by its policies.
 */
export interface Endpoint {
  namespace?: { name: string; labels: Record<string, string> };
  labels?: Record<string, string>;
  ip: string;
}

const matches = (selector: { matchLabels?: Record<string, string> } | undefined, labels: Record<string, string>) =>
  Object.entries(selector?.matchLabels ?? {}).every(([key, value]) => labels[key] === value);

function ipv4(ip: string): number {
  return ip.split(".").reduce((n, part) => n * 256 + Number(part), 0);
}

function inCidr(ip: string, cidr: string): boolean {
  const [base, bits] = cidr.split("/");
  const size = 2 ** (32 - Number(bits));
  return Math.floor(ipv4(ip) / size) === Math.floor(ipv4(base!) / size);
}

function peerMatches(peer: PolicyPeer, other: Endpoint, namespace: string): boolean {
  if (peer.ipBlock) {
    // As in Kubernetes, an ipBlock is meant for addresses outside the cluster.
    if (other.namespace) return false;
    return inCidr(other.ip, peer.ipBlock.cidr) && !(peer.ipBlock.except ?? []).some((c) => inCidr(other.ip, c));
  }
  if (!other.namespace || !other.labels) return false;
  const sameNamespace = other.namespace.name === namespace;
  if (peer.namespaceSelector) {
    return matches(peer.namespaceSelector, other.namespace.labels) && matches(peer.podSelector, other.labels);
  }
  return sameNamespace && matches(peer.podSelector, other.labels);
}

/** Whether `policies` (all in `namespace`) let `from` open a TCP connection to `to` on `port`. */
export function networkAllows(
  policies: NetworkPolicySpec[],
  namespace: string,
  from: Endpoint,
  to: Endpoint,
  port: number,
): boolean {
  const side = (self: Endpoint, other: Endpoint, type: "Ingress" | "Egress") => {
    if (self.namespace?.name !== namespace) return true; // not ours to govern
    const selecting = policies.filter((p) => p.policyTypes.includes(type) && matches(p.podSelector, self.labels ?? {}));
    if (selecting.length === 0) return true;
    return selecting.some((p) =>
      (type === "Ingress" ? p.ingress : p.egress)?.some((rule) => {
        const peers = type === "Ingress" ? rule.from : rule.to;
        const peerOk = !peers || peers.some((peer) => peerMatches(peer, other, namespace));
        const portOk =
          !rule.ports || rule.ports.some((p) => (p.protocol ?? "TCP") === "TCP" && Number(p.port) === port);
        return peerOk && portOk;
      }),
    );
  };
  return side(from, to, "Egress") && side(to, from, "Ingress");
}
