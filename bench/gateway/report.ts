/** The final table, the target verdicts and the JSON file with every figure. */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { TargetName } from "./load.ts";
import { served } from "./process-stats.ts";
import type { Summary } from "./stats.ts";
import type { LoadRun, Results, StreamRun } from "./results.ts";
import type { Verdict } from "./verify.ts";

export type { LoadRun, Results, StreamRun };

const fmt = (n: number | undefined, digits = 1) =>
  n === undefined || !Number.isFinite(n)
    ? "–"
    : n.toLocaleString("en", { maximumFractionDigits: digits, minimumFractionDigits: digits });
const ratio = (a: number | undefined, b: number | undefined) =>
  a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b === 0 ? undefined : a / b;

type Row = [string, number | undefined, number | undefined, number | undefined, number | undefined, number?];

/** The rows of a streaming scenario: completed, TTFT, added TTFT p99, CPU per stream. */
function streamRows(scenario: string, s: Partial<Record<TargetName, StreamRun>>): Row[] {
  const rows: Row[] = [
    [`${scenario}: completed`, s.direct?.completed, s.ours?.completed, s.peer?.completed, undefined, 0],
  ];
  for (const key of ["p50", "p99"] as const) {
    rows.push([
      `${scenario}: TTFT ${key} ms`,
      s.direct?.ttft[key],
      s.ours?.ttft[key],
      s.peer?.ttft[key],
      ratio(s.ours?.ttft[key], s.peer?.ttft[key]),
    ]);
  }
  const addedTtft = (target: TargetName) =>
    s[target] && s.direct ? s[target]!.ttft.p99 - s.direct.ttft.p99 : undefined;
  rows.push([
    `${scenario}: added TTFT p99 ms`,
    s.direct ? 0 : undefined,
    addedTtft("ours"),
    addedTtft("peer"),
    ratio(addedTtft("ours"), addedTtft("peer")),
  ]);
  const cpu = (run: StreamRun | undefined) => (run ? served(run.perStream).cpuMs : undefined);
  rows.push([
    `${scenario}: CPU ms per stream`,
    cpu(s.direct),
    cpu(s.ours),
    cpu(s.peer),
    ratio(cpu(s.ours), cpu(s.peer)),
    2,
  ]);
  return rows;
}

export function printTable(r: Results): void {
  const l = r.latency;
  const t = r.throughput;
  const added = (run: Partial<Record<TargetName, LoadRun>>, key: keyof Summary, target: TargetName) =>
    run[target] && run.direct ? run[target]!.latency[key] - run.direct.latency[key] : undefined;
  const errors = (run: LoadRun | undefined) => (run ? Object.values(run.errors).reduce((a, b) => a + b, 0) : undefined);
  const rows: Row[] = [];
  const latencyRow = (label: string, key: keyof Summary): Row => [
    label,
    l.direct?.latency[key],
    l.ours?.latency[key],
    l.peer?.latency[key],
    ratio(l.ours?.latency[key], l.peer?.latency[key]),
  ];
  rows.push(latencyRow("1 conn: latency p50 ms", "p50"), latencyRow("1 conn: latency p90 ms", "p90"));
  rows.push(latencyRow("1 conn: latency p99 ms", "p99"), latencyRow("1 conn: latency mean ms", "mean"));
  for (const key of ["p50", "p99", "mean"] as const) {
    const ours = added(l, key, "ours");
    const peer = added(l, key, "peer");
    rows.push([`1 conn: added ${key} ms`, l.direct ? 0 : undefined, ours, peer, ratio(ours, peer)]);
  }
  rows.push(["64 conn: requests/s", t.direct?.rps, t.ours?.rps, t.peer?.rps, ratio(t.ours?.rps, t.peer?.rps)]);
  for (const key of ["p50", "p90", "p99"] as const) {
    const k = key;
    rows.push([
      `64 conn: latency ${k} ms`,
      t.direct?.latency[k],
      t.ours?.latency[k],
      t.peer?.latency[k],
      ratio(t.ours?.latency[k], t.peer?.latency[k]),
    ]);
  }
  for (const [label, key] of [
    ["CPU ms", "cpuMs"],
    ["writes", "writes"],
    ["sleeps", "sleeps"],
  ] as const) {
    const per = (run: LoadRun | undefined) => (run ? served(run.perRequest)[key] : undefined);
    rows.push([
      `64 conn: ${label} per request`,
      per(t.direct),
      per(t.ours),
      per(t.peer),
      ratio(per(t.ours), per(t.peer)),
      2,
    ]);
  }
  rows.push(["64 conn: errors", errors(t.direct), errors(t.ours), errors(t.peer), undefined, 0]);
  const cpuOf = (group: string) => t.ours?.perRequest[group]?.cpuMs ?? NaN;
  const billingAndPostgres = t.ours ? cpuOf("billing") + cpuOf("postgres") : undefined;
  rows.push(["64 conn: billing + PostgreSQL CPU ms/req.", undefined, billingAndPostgres, undefined, undefined, 2]);
  const db = t.ours?.database;
  if (db) {
    rows.push(["64 conn: WAL bytes per request", undefined, db.walBytes, undefined, undefined, 0]);
    rows.push(["64 conn: billing row writes per request", undefined, db.rowWrites, undefined, undefined, 2]);
    rows.push(["64 conn: billing index entries/req. (est.)", undefined, db.indexEntries, undefined, undefined, 2]);
    for (const [table, share] of Object.entries(db.hotShare))
      rows.push([`64 conn: HOT updates of ${table} %`, undefined, share * 100, undefined, undefined, 0]);
  }
  rows.push(...streamRows("streams", r.streams), ...streamRows("arrivals", r.arrivals));
  for (const [name, mb] of Object.entries(r.rss?.peakMb ?? {}))
    rows.push([`streams: peak RSS ${name} MB`, undefined, mb, undefined, undefined, 0]);
  if (r.rss) rows.push(["streams: peak RSS sum MB", undefined, r.rss.sumOfPeaksMb, undefined, undefined, 0]);

  const cells = rows.map(([label, d, o, p, q, digits]) => [
    label,
    fmt(d, digits ?? 1),
    fmt(o, digits ?? 1),
    fmt(p, digits ?? 1),
    fmt(q, 2),
  ]);
  const header = ["scenario", "direct", "ours", "peer", "ours/peer"];
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: string[]) =>
    `| ${c.map((v, i) => (i === 0 ? v.padEnd(widths[i]!) : v.padStart(widths[i]!))).join(" | ")} |`;
  console.log(
    `\n${line(header)}\n|${widths.map((w, i) => (i === 0 ? "-".repeat(w + 2) : `${"-".repeat(w + 1)}:`)).join("|")}|`,
  );
  for (const c of cells) console.log(line(c));

  console.log("\nTargets (reported, not asserted; bench/gateway/targets.ts):");
  for (const g of r.goals) {
    const verdict = g.pass === undefined ? "n/a " : g.pass ? "PASS" : "FAIL";
    console.log(`  ${verdict}  ${g.target}: ${g.value}${g.caveat ? ` [${g.caveat}]` : ""}`);
  }
  console.log("\nCorrectness (asserted):");
  for (const v of r.verdicts) console.log(`  ${v.ok ? "PASS" : "FAIL"}  ${verdictLine(v)}`);
}

export function verdictLine(v: Verdict): string {
  return (
    `${v.scenario}: ${v.sent} requests sent to ours so far, ${v.usageRecords} usage records ` +
    `(${v.expectedSuccess} successes, ${v.expectedFailed} failed streams, ${v.optional} without a required record, ` +
    `${v.refusedWithoutRecord} non-200 answers without a record), settled in ${v.settleSeconds.toFixed(1)} s` +
    (v.ok ? "" : `; ${v.problems.length} problem(s):\n      ${v.problems.join("\n      ")}`)
  );
}

export function writeResults(root: string, r: Results): string {
  const dir = join(root, "bench/results");
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `gateway-${r.startedAt.replace(/[:.]/g, "-")}.json`);
  writeFileSync(
    path,
    `${JSON.stringify(r, (_key, value: unknown) => (typeof value === "bigint" ? String(value) : value), 2)}\n`,
  );
  return path;
}
