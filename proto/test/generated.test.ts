import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const protoDir = join(dirname(fileURLToPath(import.meta.url)), "..");
const buf = join(protoDir, "..", "node_modules", ".bin", "buf");

function listFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath, entry.name)))
    .sort();
}

describe("generated TypeScript in proto/gen", () => {
  const fresh = mkdtempSync(join(tmpdir(), "mkt-proto-"));
  afterAll(() => rmSync(fresh, { recursive: true, force: true }));

  it("is what `npm run proto` produces from the current .proto files", () => {
    execFileSync(buf, ["generate", "--output", fresh], { cwd: protoDir });
    const committed = join(protoDir, "gen");
    expect(listFiles(join(fresh, "gen"))).toEqual(listFiles(committed));
    for (const file of listFiles(committed)) {
      expect(readFileSync(join(fresh, "gen", file), "utf8"), `${file} is stale: run npm run proto`).toBe(
        readFileSync(join(committed, file), "utf8"),
      );
    }
  });
});
