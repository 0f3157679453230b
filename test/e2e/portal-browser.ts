import { mkdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import { chromium, type Browser, type Page } from "playwright-core";
import { expect } from "vitest";

/** The widths the portal is checked at (docs/portal.md#tests). */
export const VIEWPORTS = {
  desktop: { width: 1280, height: 800 },
  phone: { width: 390, height: 844 },
} as const;
export type ViewportName = keyof typeof VIEWPORTS;

/** Git-ignored; look at them after a change to the portal. */
export const SCREENSHOT_DIR = new URL("./screenshots/", import.meta.url).pathname;

const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

/** Debian's chromium (`.ci/run` installs it): Playwright's own download cannot be reached here. */
export async function launchChromium(): Promise<Browser> {
  const executablePath = execFileSync("sh", ["-c", "command -v chromium"], { encoding: "utf8" }).trim();
  return chromium.launch({
    executablePath,
    // --no-sandbox: the tests run as root; the rest keep the browser off the closed network.
    args: ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

/**
 * One person's browser at one width: confirmations accepted, console errors and page errors
 * collected. Chrome logs every failed load as a console error, so none is expected (a logged-out
 * visit learns it is logged out from GET /auth/session's 200), and a test that provokes an API
 * error on purpose names it with `expectFailedLoad`.
 */
export async function openPortal(browser: Browser, baseUrl: string, viewport: ViewportName) {
  const context = await browser.newContext({ viewport: VIEWPORTS[viewport], baseURL: baseUrl });
  const page = await context.newPage();
  const problems: string[] = [];
  const expected: { path: string; status: number }[] = [];
  const expectFailedLoad = (path: string, status: number) => expected.push({ path, status });
  page.on("dialog", (dialog) => void dialog.accept());
  page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));
  page.on("console", (message) => {
    if (message.type() !== "error") return;
    const at = message.location().url;
    if (expected.some((e) => at.endsWith(e.path) && message.text().includes(`status of ${e.status}`))) return;
    problems.push(`console error: ${message.text()} (${at})`);
  });
  return { context, page, problems, expectFailedLoad };
}

/**
 * Checks the page as it is now: axe-core finds no serious or critical violation, nothing
 * scrolls sideways, and a full-page screenshot is saved as `<name>.png`.
 */
export async function checkPage(page: Page, name: string): Promise<void> {
  await page.waitForLoadState("networkidle");
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  await page.screenshot({ path: `${SCREENSHOT_DIR}${name}.png`, fullPage: true });
  // Evaluated through the DevTools protocol, so the page's CSP (no inline script) is untouched.
  const violations = (await page.evaluate(`(async () => {
    if (!window.axe) { ${axeSource} }
    const result = await window.axe.run(document, { resultTypes: ["violations"] });
    return result.violations
      .filter((v) => v.impact === "serious" || v.impact === "critical")
      .map((v) => v.id + ": " + v.help + " — " + v.nodes.map((n) => n.target.join(" ")).join(", "));
  })()`)) as string[];
  expect(violations, `axe on ${name}`).toEqual([]);
  const overflow = (await page.evaluate(
    "document.documentElement.scrollWidth - document.documentElement.clientWidth",
  )) as number;
  expect(overflow, `horizontal scroll on ${name}`).toBeLessThanOrEqual(0);
  // No table hides columns behind a sideways scroll (on a phone, rows are cards of labelled lines).
  // Each such table is named by its caption and how far it overflows, so a failure says which.
  const sideways = (await page.evaluate(
    "[...document.querySelectorAll('.table-wrap')].filter((t) => t.scrollWidth > t.clientWidth)" +
      ".map((t) => (t.querySelector('caption')?.textContent ?? '?') + ': ' + t.scrollWidth + 'px in ' + t.clientWidth + 'px')",
  )) as string[];
  expect(sideways, `tables scrolling sideways on ${name}`).toEqual([]);
}

/**
 * Presses Tab (Shift+Tab when `backwards`) until the element named `name` (a link's or button's
 * text) has the focus, as a keyboard-only person would; returns how many presses it took.
 */
export async function tabTo(page: Page, name: string, { backwards = false, limit = 20 } = {}): Promise<number> {
  for (let presses = 1; presses <= limit; presses++) {
    await page.keyboard.press(backwards ? "Shift+Tab" : "Tab");
    const focused = (await page.evaluate("document.activeElement?.textContent?.trim() ?? ''")) as string;
    if (focused === name) return presses;
  }
  throw new Error(`"${name}" was not reached in ${limit} presses of Tab`);
}
