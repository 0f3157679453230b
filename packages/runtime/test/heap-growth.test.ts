import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { HEAP_GROWING_PERCENT } from "../src/heap-growth.ts";

const MODULE = fileURLToPath(new URL("../src/heap-growth.ts", import.meta.url));

/**
 * The growing factor V8 used after a full collection in a fresh process that imports the module
 * first, read from V8's own trace (`--trace-gc-verbose` prints "[HeapController] factor X").
 */
function factorsAfterImport(nodeFlags: string[]): number[] {
  const script = `await import(${JSON.stringify(MODULE)}); const keep = []; for (let i = 0; i < 1e5; i++) keep.push({ i }); gc();`;
  const out = execFileSync(
    process.execPath,
    [...nodeFlags, "--expose-gc", "--trace-gc-verbose", "--input-type=module", "-e", script],
    { encoding: "utf8", env: { ...process.env, NODE_OPTIONS: "" } },
  );
  return [...out.matchAll(/\[HeapController\] factor ([\d.]+)/g)].map((m) => Number(m[1]));
}

describe("heap growth", () => {
  it("fixes V8's old-generation growing factor for the process that imports it", () => {
    const factors = factorsAfterImport([]);
    expect(factors.length).toBeGreaterThan(0);
    for (const factor of factors) expect(factor).toBe(1 + HEAP_GROWING_PERCENT / 100);
  });

  it("leaves an operator's --heap-growing-percent on the command line in force", () => {
    const factors = factorsAfterImport(["--heap-growing-percent=200"]);
    expect(factors.length).toBeGreaterThan(0);
    for (const factor of factors) expect(factor).toBe(3);
  });
});
