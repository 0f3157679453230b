import { useId, useState, type InputHTMLAttributes, type ReactNode } from "react";

/** A labelled input: every input of the portal has a visible label tied to it. */
export function Field(props: InputHTMLAttributes<HTMLInputElement> & { label: string; hint?: string }) {
  const { label, hint, ...input } = props;
  const id = useId();
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <input id={id} aria-describedby={hint ? `${id}-hint` : undefined} {...input} />
      {hint && (
        <small id={`${id}-hint`} className="hint">
          {hint}
        </small>
      )}
    </div>
  );
}

export function ErrorNote({ message }: { message: string | undefined }) {
  if (!message) return null;
  return (
    <p className="error" role="alert">
      {message}
    </p>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p className="muted" role="status">
      Loading {what}…
    </p>
  );
}

export function Empty({ children }: { children: ReactNode }) {
  return <p className="empty">{children}</p>;
}

export function Stat({ label, value, note }: { label: string; value: ReactNode; note?: ReactNode }) {
  return (
    <div className="stat">
      <span className="stat-label">{label}</span>
      <span className="stat-value">{value}</span>
      {note && <span className="stat-note">{note}</span>}
    </div>
  );
}

/**
 * A secret (API key, password) the server shows only once: displayed with a copy button and a
 * warning, held only by this component (never stored), gone when it is dismissed.
 */
export function SecretOnce({ title, secret, onDone }: { title: string; secret: string; onDone: () => void }) {
  const [copied, setCopied] = useState(false);
  const copy = async () => {
    await navigator.clipboard.writeText(secret);
    setCopied(true);
  };
  return (
    <div className="secret" role="region" aria-label={title}>
      <h3>{title}</h3>
      <p className="warning">Copy it now: it is shown only once and cannot be shown again.</p>
      <code className="secret-value" data-testid="secret">
        {secret}
      </code>
      <div className="row">
        <button type="button" onClick={copy}>
          {copied ? "Copied" : "Copy"}
        </button>
        <button type="button" className="secondary" onClick={onDone}>
          I have saved it
        </button>
      </div>
    </div>
  );
}

/** A column of a `Table`: its header, also the label of each of its cells on a phone. */
export interface Column {
  label: string;
  /** Figures: right-aligned, tabular digits. */
  numeric?: boolean;
  /** A header only screen readers need (a column of buttons that name what they act on). */
  hideLabel?: boolean;
}

export interface Row {
  key: string;
  cells: ReactNode[];
}

/**
 * A table. On a wide screen it is a table (scrolling sideways inside itself if it must); on a
 * phone each row becomes a card of labelled lines (styles.css, `.table-wrap`), so no column is
 * ever out of sight. Each cell carries its column's label for that, so a column and its label
 * cannot disagree.
 */
export function Table({ caption, columns, rows }: { caption: string; columns: Column[]; rows: Row[] }) {
  return (
    <div className="table-wrap" tabIndex={0} role="region" aria-label={caption}>
      <table>
        <caption className="visually-hidden">{caption}</caption>
        <thead>
          <tr>
            {columns.map((column) => (
              <th key={column.label} scope="col" className={column.numeric ? "num" : undefined}>
                {column.hideLabel ? <span className="visually-hidden">{column.label}</span> : column.label}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((row) => (
            <tr key={row.key}>
              {row.cells.map((cell, i) => {
                const column = columns[i]!;
                const blank = cell === null || cell === undefined || cell === false || cell === "";
                const classes = [column.numeric && "num", blank && "blank"].filter(Boolean).join(" ");
                return (
                  <td key={column.label} className={classes || undefined}>
                    {/* Shown on a phone only; the column header already names the cell for a screen reader. */}
                    {!column.hideLabel && (
                      <span className="cell-label" aria-hidden="true">
                        {column.label}
                      </span>
                    )}
                    <div className="cell-value">{cell}</div>
                  </td>
                );
              })}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
