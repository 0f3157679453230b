import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { anchorsOf } from "./markdown-anchors.ts";

// A clone alone must explain the design: no tracked file may point at the brief beside the
// repository (its file, its numbered sections), at an issue by number, or at the removed decision
// diary; cite a section of docs/architecture.md or a record in docs/adr/ instead. Other projects'
// bugs (`owner/repo#N`) and public URLs resolve for everyone and stay. Every `docs/….md#anchor`
// cited anywhere must name a file that exists and a heading it has.

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const self = relative(root, fileURLToPath(import.meta.url));

const FORBIDDEN: { pattern: RegExp; what: string }[] = [
  { pattern: /DESIGN\.md/, what: "the external brief's file" },
  { pattern: /DESIGN §/, what: "a section of the external brief" },
  { pattern: /§\s?\d/, what: "a numbered section of the external brief" },
  { pattern: /\bissues?\s+#?\d+/i, what: "an issue number" },
  { pattern: /\bdecisions\.md\b/, what: "the removed decision diary" },
];
/** A repository path to a markdown page under docs/, with its anchor if any; `../` prefixes kept. */
const DOC_CITATION = /(?<![\w/.-])((?:\.\.\/)*docs\/[\w./-]*?\.md)(?:#([\w-]+))?/g;
const SKIPPED = new Set(["package-lock.json", self]);
const BINARY = /\.(png|jpe?g|gif|ico|webp|woff2?|ttf|gz|tgz|zip|pdf)$/i;

/** The tracked text files, with their lines. */
function trackedTexts(): { file: string; lines: string[] }[] {
  const names = execFileSync("git", ["ls-files", "-z"], { cwd: root, encoding: "utf8" }).split("\0");
  return names.flatMap((file) => {
    if (!file || SKIPPED.has(file) || file.includes("node_modules/") || BINARY.test(file)) return [];
    const path = resolve(root, file);
    if (!existsSync(path)) return []; // deleted in the work tree, not yet committed
    const text = readFileSync(path, "utf8");
    return text.includes("\0") ? [] : [{ file, lines: text.split("\n") }];
  });
}

/** Why a cited page or anchor does not resolve, or undefined when it does. */
function brokenCitation(file: string, path: string, anchor: string | undefined): string | undefined {
  const to = path.startsWith("../") ? resolve(root, dirname(file), path) : resolve(root, path);
  if (!existsSync(to)) return `no such file: ${relative(root, to)}`;
  if (anchor !== undefined && !anchorsOf(to).has(anchor)) return `no heading #${anchor} in ${relative(root, to)}`;
  return undefined;
}

describe("references in tracked files", () => {
  const texts = trackedTexts();

  it("none leads outside the repository (brief, its sections, issue numbers, decisions.md)", () => {
    const found = texts.flatMap(({ file, lines }) =>
      lines.flatMap((line, i) =>
        FORBIDDEN.filter(({ pattern }) => pattern.test(line)).map(
          ({ what }) => `${file}:${i + 1}: ${what}: ${line.trim().slice(0, 120)}`,
        ),
      ),
    );
    expect(found).toEqual([]);
  });

  it("every cited docs/ page and anchor exists", () => {
    const broken = texts.flatMap(({ file, lines }) =>
      lines.flatMap((line, i) =>
        [...line.matchAll(DOC_CITATION)].flatMap((m) => {
          const reason = brokenCitation(file, m[1]!, m[2]);
          return reason ? [`${file}:${i + 1}: ${m[0]}: ${reason}`] : [];
        }),
      ),
    );
    expect(broken).toEqual([]);
  });

  it("tells a reference from what may stay", () => {
    const flagged = (line: string) => FORBIDDEN.some(({ pattern }) => pattern.test(line));
    expect(
      ["see DESIGN.md", "DESIGN §2.3", "(§7)", "issue 18's", "Issues 20", "issue #4", "docs/decisions.md"].map(flagged),
    ).toEqual([true, true, true, true, true, true, true]);
    expect(
      [
        "kysely-org/kysely#1990",
        "issue a new certificate",
        "the issue quoted",
        "docs/adr/0007-admission-leases.md",
      ].map(flagged),
    ).toEqual([false, false, false, false]);
    expect([..."(docs/leases.md#settings) and ../docs/adr/0001-x.md".matchAll(DOC_CITATION)].map((m) => m[0])).toEqual([
      "docs/leases.md#settings",
      "../docs/adr/0001-x.md",
    ]);
  });
});
