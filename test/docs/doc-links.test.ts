import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import GithubSlugger from "github-slugger";
import { describe, expect, it } from "vitest";

// Every relative link and `#anchor` in README.md and docs/ must lead somewhere in the clone: a
// file or folder that exists and, for a markdown file, a heading GitHub gives that anchor (its
// heading-to-anchor rule, as github-slugger implements it: lowercase, punctuation but '-' dropped,
// spaces to '-', a repeated heading gets -1, -2 …) or an explicit `<a id>` / `<a name>`.

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

const FENCE = /^\s*(```|~~~)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
const HTML_ANCHOR = /<a\s+(?:id|name)="([^"]+)"/g;
/** `[text](target)` and `![alt](target)`, with an optional title; the text may hold `[x]` pairs. */
const LINK = /!?\[(?:[^[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g;

/** The lines of a markdown file outside fenced code blocks, numbered from 1. */
function proseLines(text: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = [];
  let fenced = false;
  text.split("\n").forEach((line, i) => {
    if (FENCE.test(line)) fenced = !fenced;
    else if (!fenced) out.push({ line: i + 1, text: line });
  });
  return out;
}

/** A heading's text as GitHub renders it before slugging: code, links, images and tags unwrapped. */
function renderedHeading(source: string): string {
  return source
    .replace(/`([^`]*)`/g, "$1")
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/<[^>]+>/g, "")
    .replace(/(\*\*|__)(.+?)\1/g, "$2")
    .replace(/(^|\W)[*_](.+?)[*_](?=\W|$)/g, "$1$2");
}

const anchorCache = new Map<string, Set<string>>();

/** The anchors GitHub gives a markdown file's headings, plus its explicit HTML anchors. */
function anchorsOf(file: string): Set<string> {
  let anchors = anchorCache.get(file);
  if (anchors) return anchors;
  const slugger = new GithubSlugger();
  anchors = new Set();
  for (const { text } of proseLines(readFileSync(file, "utf8"))) {
    const heading = HEADING.exec(text);
    if (heading) anchors.add(slugger.slug(renderedHeading(heading[2]!)));
    for (const m of text.matchAll(HTML_ANCHOR)) anchors.add(m[1]!);
  }
  anchorCache.set(file, anchors);
  return anchors;
}

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
