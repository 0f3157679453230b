// Prints the gzipped size of the JavaScript the portal's page loads before anything else (the
// entry and the chunks it imports statically) and fails the build above the budget
// (docs/portal.md#building).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";

const BUDGET_BYTES = 150 * 1024;
const dist = new URL("../dist/", import.meta.url).pathname;
const html = readFileSync(join(dist, "index.html"), "utf8");
const initial = [...html.matchAll(/<(?:script|link)[^>]+(?:src|href)="\/portal\/(assets\/[^"]+\.js)"/g)].map(
  (m) => m[1]!,
);
let total = 0;
for (const file of initial) {
  const gzipped = gzipSync(readFileSync(join(dist, file)), { level: 9 }).length;
  total += gzipped;
  console.log(`  ${file}  ${(gzipped / 1024).toFixed(1)} KB gzipped`);
}
console.log(`portal: initial JS ${(total / 1024).toFixed(1)} KB gzipped (budget ${BUDGET_BYTES / 1024} KB)`);
if (total > BUDGET_BYTES) {
  console.error("portal: the initial JavaScript is over budget");
  process.exit(1);
}
