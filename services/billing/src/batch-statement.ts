import type { Em } from "./context.ts";

/** What a column array may hold: text, numbers, booleans, times and NULL. */
export type ArrayElement = string | bigint | number | boolean | Date | null;

const quote = (text: string) => `"${text.replace(/[\\"]/g, "\\$&")}"`;

function element(value: ArrayElement): string {
  if (value === null) return "NULL";
  if (value instanceof Date) return quote(value.toISOString());
  if (typeof value === "string") return quote(value);
  return String(value);
}

/**
 * A Postgres array literal of one column of a batch (`{"a","b",NULL}`), bound as one `?::type[]`
 * parameter and unnested by the statement. A batch's statement then has the same few parameters
 * whatever its size, and PostgreSQL reads each column as one array instead of parsing and
 * planning a VALUES list of one expression per row and column.
 */
export function sqlArray(values: readonly ArrayElement[]): string {
  return `{${values.map(element).join(",")}}`;
}

/**
 * One step of a statement that makes many writes at once: a data-modifying WITH query
 * (`name as (sql)`) with its parameters, in the order its `?` appear.
 */
export interface Cte {
  name: string;
  sql: string;
  params: unknown[];
}

/**
 * Runs the CTEs and then `select` (which may read what they return) as one statement: one round
 * trip to PostgreSQL for all of them. Every data-modifying WITH query runs to completion whether
 * or not `select` reads it; they all see the same snapshot and cannot see each other's writes
 * (only what a RETURNING hands on), so no row may be changed by two of them. Returns the row `select` gives.
 */
export async function runTogether(em: Em, ctes: readonly Cte[], select: string): Promise<Record<string, unknown>> {
  const sql = `with ${ctes.map((cte) => `${cte.name} as (${cte.sql})`).join(",\n")}\n${select}`;
  const [row] = await em.execute(
    sql,
    ctes.flatMap((cte) => cte.params),
  );
  return row ?? {};
}
