/** Peak resident set of processes, sampled from /proc/<pid>/status (VmRSS) at an interval. */
import { statusField } from "./process-stats.ts";

export interface RssPeaks {
  /** Each process's highest sample, MB. */
  peakMb: Record<string, number>;
  /** The sum of those peaks (an upper bound of the highest total), MB. */
  sumOfPeaksMb: number;
  /** The highest total of one sampling round, MB. */
  peakOfSumMb: number;
  samples: number;
}

/** NaN once the process is gone. */
const rssMb = (pid: number) => statusField(pid, "VmRSS") / 1024;

export function sampleRss(pids: Record<string, number>, intervalMs: number): { stop(): RssPeaks } {
  const peakMb: Record<string, number> = Object.fromEntries(Object.keys(pids).map((name) => [name, 0]));
  let peakOfSumMb = 0;
  let samples = 0;
  const sample = () => {
    let total = 0;
    for (const [name, pid] of Object.entries(pids)) {
      const mb = rssMb(pid);
      if (!Number.isFinite(mb)) continue;
      total += mb;
      if (mb > peakMb[name]!) peakMb[name] = mb;
    }
    peakOfSumMb = Math.max(peakOfSumMb, total);
    samples++;
  };
  sample();
  const timer = setInterval(sample, intervalMs);
  return {
    stop() {
      clearInterval(timer);
      sample();
      const sumOfPeaksMb = Object.values(peakMb).reduce((a, b) => a + b, 0);
      return { peakMb, sumOfPeaksMb, peakOfSumMb, samples };
    },
  };
}
