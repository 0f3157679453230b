import { createElement } from "react";
import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { Table, type Column } from "../src/components/ui.tsx";

// The table's markup, which styles.css turns into labelled cards on a phone (node has no DOM:
// the markup is read as text).
const COLUMNS: Column[] = [
  { label: "Plan" },
  { label: "Monthly", numeric: true },
  { label: "Actions", hideLabel: true },
];

function cellsOf(cells: unknown[]): string[] {
  const html = renderToStaticMarkup(
    createElement(Table, {
      caption: "Your subscriptions",
      columns: COLUMNS,
      rows: [{ key: "a", cells: cells as never[] }],
    }),
  );
  return [...html.matchAll(/<td[^>]*>.*?<\/td>/g)].map((m) => m[0]);
}

function headersOf(): string[] {
  const html = renderToStaticMarkup(
    createElement(Table, { caption: "Your subscriptions", columns: COLUMNS, rows: [] }),
  );
  return [...html.matchAll(/<th[ >][^>]*>.*?<\/th>/g)].map((m) => m[0]);
}

describe("Table", () => {
  it("labels each cell with its column, hidden from screen readers that have the header", () => {
    const cells = cellsOf(["Starter", "$1.00", createElement("button", null, "Cancel")]);
    expect(cells[0]).toBe(
      '<td><span class="cell-label" aria-hidden="true">Plan</span><div class="cell-value">Starter</div></td>',
    );
    expect(cells[1]).toContain('<span class="cell-label" aria-hidden="true">Monthly</span>');
    expect(cells[2]).toBe('<td><div class="cell-value"><button>Cancel</button></div></td>');
  });

  it("right-aligns figures in the header and the cells, and keeps a hidden header for screen readers", () => {
    expect(headersOf()).toEqual([
      '<th scope="col">Plan</th>',
      '<th scope="col" class="num">Monthly</th>',
      '<th scope="col"><span class="visually-hidden">Actions</span></th>',
    ]);
    expect(cellsOf(["Starter", "$1.00", null])[1]).toMatch(/^<td class="num">/);
  });

  it("marks an empty cell blank, so a phone card leaves out its line", () => {
    expect(cellsOf(["Starter", "", false]).map((td) => /^<td(?: class="([^"]*)")?>/.exec(td)![1])).toEqual([
      undefined,
      "num blank",
      "blank",
    ]);
  });
});
