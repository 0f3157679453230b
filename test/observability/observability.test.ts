/**
 * deploy/observability against promtool and the code: the alert rules are valid and their unit
 * tests pass (promtool, from Debian's `prometheus` package, which .ci/run installs), and every
 * metric the rules and the Grafana dashboard read is one the edge, the registry or billing
 * exports, as their real registration code exposes it on /metrics.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import Fastify from "fastify";
import { parse } from "yaml";
import { describe, expect, it } from "vitest";
import { edgeMetricsRegistry, installMetrics } from "../../edge/src/plugins/metrics.ts";
import { createRelayMetrics } from "../../edge/src/relay/relay-metrics.ts";
import { RoutingTable } from "../../edge/src/routing/routing-table.ts";
import { createBillingMetrics } from "../../services/billing/src/metrics/billing-metrics.ts";
import { createRegistryMetrics } from "../../services/registry/src/metrics/registry-metrics.ts";
import { root } from "../deploy/manifests.ts";
import { exposedSeries, metricNames } from "./promql.ts";

const DIR = join(root, "deploy/observability");
const read = (file: string) => readFileSync(join(DIR, file), "utf8");

interface Rule {
  alert?: string;
  expr: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
const rules = (parse(read("alerts.yml")) as { groups: Array<{ rules: Rule[] }> }).groups.flatMap((g) => g.rules);

interface Panel {
  id: number;
  title: string;
  datasource: { uid: string };
  targets: Array<{ expr: string; datasource: { uid: string } }>;
}
const dashboard = JSON.parse(read("dashboard.json")) as {
  uid: string;
  templating: { list: Array<{ name: string; type: string; query: string }> };
  panels: Panel[];
};

function promtool(...args: string[]): string {
  try {
    return execFileSync("promtool", args, { cwd: DIR, encoding: "utf8", stdio: "pipe" });
  } catch (err) {
    const e = err as { code?: string; stdout?: string; stderr?: string };
    if (e.code === "ENOENT")
      throw new Error("promtool is missing: apt-get install prometheus (.ci/run does)", { cause: err });
    throw new Error(`promtool ${args.join(" ")}:\n${e.stdout}${e.stderr}`, { cause: err });
  }
}

/** Everything the edge (its relay too), the registry and billing export, from their own registration code. */
async function exported(): Promise<Set<string>> {
  const app = Fastify();
  const metrics = edgeMetricsRegistry();
  installMetrics(app, metrics, new RoutingTable());
  createRelayMetrics(metrics);
  const edge = await app.inject({ method: "GET", url: "/metrics" });
  await app.close();
  const registry = await createRegistryMetrics().registry.metrics();
  const billing = await createBillingMetrics().registry.metrics();
  return new Set([...exposedSeries(edge.body), ...exposedSeries(registry), ...exposedSeries(billing)]);
}

describe("deploy/observability/alerts.yml", () => {
  it("passes promtool check rules", () => {
    expect(promtool("check", "rules", "alerts.yml")).toContain(`SUCCESS: ${rules.length} rules found`);
  });

  it("fires as its promtool unit tests expect (alerts.test.yml)", () => {
    expect(promtool("test", "rules", "alerts.test.yml")).toContain("SUCCESS");
  });

  it("gives every alert a severity and a summary", () => {
    for (const rule of rules) {
      expect(rule.alert, rule.expr).toBeTruthy();
      expect(["page", "warn", "ticket"], rule.alert).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary, rule.alert).toBeTruthy();
    }
  });
});

describe("deploy/observability/dashboard.json", () => {
  it("asks for its Prometheus data source and uses it in every panel", () => {
    expect(dashboard.uid).toBeTruthy();
    expect(dashboard.templating.list).toContainEqual(
      expect.objectContaining({ name: "datasource", type: "datasource", query: "prometheus" }),
    );
    expect(new Set(dashboard.panels.map((p) => p.id)).size).toBe(dashboard.panels.length);
    for (const panel of dashboard.panels) {
      expect(panel.targets.length, panel.title).toBeGreaterThan(0);
      for (const target of [panel, ...panel.targets]) expect(target.datasource.uid, panel.title).toBe("${datasource}");
    }
  });
});

describe("the metrics the rules and the dashboard read", () => {
  const expressions = [
    ...rules.map((rule) => ({ where: `alert ${rule.alert}`, expr: rule.expr })),
    ...dashboard.panels.flatMap((panel) =>
      panel.targets.map((t) => ({ where: `panel "${panel.title}"`, expr: t.expr })),
    ),
  ];

  it("finds metric names in every expression", () => {
    expect(metricNames('sum by (le) (rate(a_b_bucket{x="y",z=~"1|2"}[5m])) / on (i) b > 0.5 and c')).toEqual([
      "a_b_bucket",
      "b",
      "c",
    ]);
    for (const { where, expr } of expressions) expect(metricNames(expr), where).not.toEqual([]);
  });

  it("are all exported by the edge, the registry or billing", async () => {
    const series = await exported();
    expect(series).toContain("mkt_http_requests_total");
    expect(series).toContain("mkt_usage_mismatches_total");
    expect(series).toContain("mkt_settlement_lag_seconds_bucket");
    expect(series).toContain("mkt_write_offs_total");
    for (const { where, expr } of expressions) {
      for (const name of metricNames(expr)) expect(series, `${where} reads ${name}`).toContain(name);
    }
  });
});
