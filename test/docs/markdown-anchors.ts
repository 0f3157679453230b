import { readFileSync } from "node:fs";
import GithubSlugger from "github-slugger";

// GitHub's heading-to-anchor rule, as github-slugger implements it: lowercase, punctuation but '-'
// dropped, spaces to '-', a repeated heading gets -1, -2 …; plus explicit `<a id>` / `<a name>`.

const FENCE = /^\s*(```|~~~)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
const HTML_ANCHOR = /<a\s+(?:id|name)="([^"]+)"/g;

/** The lines of a markdown file outside fenced code blocks, numbered from 1. */
export function proseLines(text: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = [];
  let fenced = false;
  text.split("\n").forEach((line, i) => {
    if (FENCE.test(line)) fenced = !fenced;
    else if (!fenced) out.push({ line: i + 1, text: line });
  });
  return out;
}

/** A heading's text as GitHub renders it before slugging: code, links, images and tags unwrapped. */
export function renderedHeading(source: string): string {
  return source
    .replace(/`([^`]*)`/g, "$1")
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/<[^>]+>/g, "")
    .replace(/(\*\*|__)(.+?)\1/g, "$2")
    .replace(/(^|\W)[*_](.+?)[*_](?=\W|$)/g, "$1$2");
}

const anchorCache = new Map<string, Set<string>>();

/** The anchors GitHub gives a markdown file's headings, plus its explicit HTML anchors. */
export function anchorsOf(file: string): Set<string> {
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
