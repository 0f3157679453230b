/** Tick steps for an axis of counts (tokens, requests): whole numbers only, never "0.25 requests". */
export const WHOLE_INCREMENTS: number[] = Array.from({ length: 16 }, (_, power) =>
  [1, 2, 5].map((step) => step * 10 ** power),
).flat();

/** Room beside the labels of a y axis: uPlot's tick (10 px) and gap (5 px), and a little air. */
const AXIS_CHROME_PX = 18;

/**
 * The width of a y axis that shows all of its labels ("$0.00004" would be clipped by a fixed
 * width): the widest label as `measure` sizes it, plus the ticks and gap.
 */
export function axisWidth(labels: readonly string[], measure: (text: string) => number): number {
  const widest = labels.reduce((max, label) => Math.max(max, measure(label)), 0);
  return Math.ceil(widest + AXIS_CHROME_PX);
}

/**
 * The x range of a bar chart: half a bucket beyond the first and the last, so the bars at the
 * ends are drawn whole. `xs` are the buckets' starts (seconds); `step` is used when there is only one.
 */
export function barRange(xs: readonly number[], step: number): [number, number] {
  const first = xs[0] ?? 0;
  const last = xs[xs.length - 1] ?? first;
  const width = xs.length > 1 ? xs[1]! - first : step;
  return [first - width / 2, last + width / 2];
}
