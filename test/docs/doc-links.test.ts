import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import GithubSlugger from "github-slugger";
import { describe, expect, it } from "vitest";
import { anchorsOf, proseLines, renderedHeading } from "./markdown-anchors.ts";

// Every relative link and `#anchor` in README.md and docs/ must lead somewhere in the clone: a
// file or folder that exists and, for a markdown file, a heading GitHub gives that anchor
// (markdown-anchors.ts) or an explicit `<a id>` / `<a name>`.

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** `[text](target)` and `![alt](target)`, with an optional title; the text may hold `[x]` pairs. */
const LINK = /!?\[(?:[^[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g;

/** Link targets of a markdown file, outside code blocks and inline code. */
function linksOf(file: string): { line: number; target: string }[] {
  return proseLines(readFileSync(file, "utf8")).flatMap(({ line, text }) =>
    [...text.replace(/`[^`]*`/g, "").matchAll(LINK)].map((m) => ({ line, target: m[1]! })),
  );
}

function markdownFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: "utf8" })
    .filter((name) => name.endsWith(".md"))
    .map((name) => join(dir, name));
}

/** Why a link of `file` does not resolve, or undefined when it does. */
function brokenReason(file: string, target: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined; // https:, mailto: …: outside the clone
  const hash = target.indexOf("#");
  const path = decodeURIComponent(hash === -1 ? target : target.slice(0, hash));
  const anchor = hash === -1 ? undefined : decodeURIComponent(target.slice(hash + 1));
  const to = path === "" ? file : resolve(dirname(file), path);
  if (!to.startsWith(root)) return "leads outside the repository";
  if (!existsSync(to)) return `no such file: ${relative(root, to)}`;
  if (anchor === undefined) return undefined;
  if (!to.endsWith(".md") || statSync(to).isDirectory()) return `an anchor into a file that is not markdown`;
  return anchorsOf(to).has(anchor) ? undefined : `no heading with anchor #${anchor} in ${relative(root, to)}`;
}

const files = [join(root, "README.md"), ...markdownFiles(join(root, "docs"))];

describe("links in README.md and docs/", () => {
  it.each(files.map((f) => [relative(root, f), f]))("%s: every relative link and anchor resolves", (_name, file) => {
    const broken = linksOf(file).flatMap(({ line, target }) => {
      const reason = brokenReason(file, target);
      return reason ? [`line ${line}: (${target}) ${reason}`] : [];
    });
    expect(broken).toEqual([]);
  });

  it("reads anchors as GitHub makes them", () => {
    const slugger = new GithubSlugger();
    const slugs = ["What to watch", "What to watch", "Gateway — `npm run bench`", "The path of a chat request"].map(
      (h) => slugger.slug(renderedHeading(h)),
    );
    expect(slugs).toEqual(["what-to-watch", "what-to-watch-1", "gateway--npm-run-bench", "the-path-of-a-chat-request"]);
  });
});
