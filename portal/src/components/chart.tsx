import { useEffect, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { axisWidth, barRange, WHOLE_INCREMENTS } from "../lib/chart-axes.ts";
import type { Columns } from "../lib/usage-series.ts";

export interface ChartProps {
  title: string;
  columns: Columns;
  series: Array<{ label: string; color: string }>;
  /** Bars for counts per bucket; lines otherwise. */
  bars?: boolean;
  /** The y axis counts things (tokens, requests): whole-number ticks only. */
  whole?: boolean;
  formatValue?: (value: number) => string;
}

/** uPlot's own axis font, set explicitly so the axis can be measured with the same one. */
const AXIS_FONT = "12px system-ui, -apple-system, sans-serif";
/** A day: the bucket width of a one-bar chart (a longer range is drawn by the day). */
const DAY_SECONDS = 86_400;

let measuring: CanvasRenderingContext2D | null = null;
function textWidth(text: string): number {
  measuring ??= document.createElement("canvas").getContext("2d");
  if (!measuring) return text.length * 7;
  measuring.font = AXIS_FONT;
  return measuring.measureText(text).width;
}

/**
 * A uPlot chart sized to its container (loaded on demand, so uPlot is not in the first
 * download). uPlot draws on a canvas, so the figures are also given as text for screen readers.
 */
export default function Chart({ title, columns, series, bars, whole, formatValue }: ChartProps) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const element = box.current;
    if (!element) return;
    const paths = bars ? uPlot.paths.bars!({ size: [0.6, 40] }) : undefined;
    const plot = new uPlot(
      {
        width: element.clientWidth,
        height: 220,
        scales: bars ? { x: { time: true, range: () => barRange(columns[0], DAY_SECONDS) } } : undefined,
        series: [
          {},
          ...series.map((s) => ({
            label: s.label,
            stroke: s.color,
            fill: bars ? s.color : undefined,
            // A bar has no outline: an empty bucket draws nothing rather than a dash on the axis.
            width: bars ? 0 : 2,
            paths,
            points: bars ? { show: false } : undefined,
            value: formatValue ? (_: uPlot, v: number | null) => (v === null ? "–" : formatValue(v)) : undefined,
          })),
        ],
        axes: [
          { font: AXIS_FONT },
          {
            font: AXIS_FONT,
            values: formatValue ? (_, ticks) => ticks.map(formatValue) : undefined,
            incrs: whole ? WHOLE_INCREMENTS : undefined,
            // As wide as its widest label, so "$0.00004" is not clipped on the left.
            size: (_, values) => axisWidth(values ?? [], textWidth),
          },
        ],
        legend: { live: false },
      },
      columns as uPlot.AlignedData,
      element,
    );
    const resize = new ResizeObserver(() => plot.setSize({ width: element.clientWidth, height: 220 }));
    resize.observe(element);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [columns, series, bars, whole, formatValue]);
  const totals = series.map((s, i) => `${s.label}: ${sum(columns[i + 1] ?? [], formatValue)}`).join("; ");
  return (
    <figure className="chart">
      <figcaption>{title}</figcaption>
      <div ref={box} className="chart-canvas" aria-hidden="true" />
      <p className="visually-hidden">Totals over the range: {totals}</p>
    </figure>
  );
}

function sum(values: number[], format?: (value: number) => string): string {
  const total = values.reduce((a, b) => a + b, 0);
  return format ? format(total) : String(total);
}
