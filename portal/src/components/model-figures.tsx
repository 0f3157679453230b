import { count, when } from "../lib/format.ts";
import { Table, type Column } from "./ui.tsx";
import { ms, uptime, type Figures, type Stats, type Verification } from "../lib/endpoint-figures.ts";

const WINDOWS: Array<["last_30m" | "last_1d", string]> = [
  ["last_30m", "Last 30 minutes"],
  ["last_1d", "Last day"],
];

const COLUMNS: Column[] = [
  { label: "Window" },
  { label: "Requests", numeric: true },
  { label: "Uptime", numeric: true },
  { label: "Faults", numeric: true },
  { label: "Latency p50", numeric: true },
  { label: "First token p50", numeric: true },
  { label: "Tokens/s p50", numeric: true },
];

/** A model's live figures, one row per window. */
export function FiguresTable({ stats, caption }: { stats: Stats; caption: string }) {
  const rows = WINDOWS.map(([key, label]) => {
    const f: Figures = stats[key];
    return {
      key,
      cells: [
        label,
        count(f.requests),
        uptime(f),
        count(f.faults),
        ms(f.latency_p50_ms),
        ms(f.ttft_p50_ms),
        f.tokens_per_second_p50 ?? "–",
      ],
    };
  });
  return <Table caption={caption} columns={COLUMNS} rows={rows} />;
}

/** The verdict of verification, with what failed in its last run. */
export function VerificationNote({ verification }: { verification: Verification }) {
  const failed = verification.checks.filter((c) => !c.passed);
  return (
    <div className="verification">
      <p>
        Verification: <span className={`badge ${verification.status}`}>{verification.status}</span>{" "}
        {verification.last_run_at ? (
          <span className="muted">last run {when(verification.last_run_at)}</span>
        ) : (
          <span className="muted">runs once the model is on an open plan</span>
        )}
      </p>
      {failed.length > 0 && (
        <ul>
          {failed.map((c) => (
            <li key={c.check}>
              <code>{c.check}</code>
              {c.held ? "" : " (shown, not held against you)"}: {c.detail}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
