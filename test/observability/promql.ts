/**
 * The metric names a PromQL expression reads, found without a full parser: strings, label
 * matchers, ranges and grouping clauses are removed, and what is left that looks like an
 * identifier and is not a function call or a keyword is a metric name. Enough for the
 * expressions in deploy/observability, which test/observability checks against the code.
 */
const KEYWORDS = new Set(["by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"]);
const OPERATORS = new Set(["and", "or", "unless"]);

export function metricNames(expr: string): string[] {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ");
  const names = [...stripped.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)]
    .filter((m) => !/^\s*\(/.test(stripped.slice(m.index + m[0].length)))
    .map((m) => m[0])
    .filter((name) => !KEYWORDS.has(name) && !OPERATORS.has(name));
  return [...new Set(names)];
}

/**
 * The series names a Prometheus text exposition offers, from its `# TYPE` lines (so a labelled
 * metric counts even before its first observation): a histogram's `_bucket`, `_sum` and `_count`,
 * a summary's quantiles plus `_sum` and `_count`, any other type its own name.
 */
export function exposedSeries(exposition: string): Set<string> {
  const series = new Set<string>();
  for (const [, name, type] of exposition.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    if (type === "histogram") for (const suffix of ["_bucket", "_sum", "_count"]) series.add(name! + suffix);
    else if (type === "summary") for (const suffix of ["", "_sum", "_count"]) series.add(name! + suffix);
    else series.add(name!);
  }
  return series;
}
