import type { Browser } from "playwright-core";
import { afterAll, beforeAll, expect, it } from "vitest";
import { launchChromium, openPortal } from "./portal-browser.ts";
import { startSystem, type RunningSystem } from "./system.ts";

// The strict CSP (docs/portal.md#serving-and-security-headers) must still let the OpenAPI UI at
// /docs render, in a real browser.
let system: RunningSystem;
let browser: Browser;
beforeAll(async () => {
  [system, browser] = await Promise.all([startSystem(), launchChromium()]);
}, 90_000);
afterAll(async () => {
  await browser?.close();
  await system?.close();
});

it("renders /docs under the CSP, with no violation reported", async () => {
  const { context, page, problems } = await openPortal(browser, system.url, "desktop");
  try {
    await page.goto("/docs");
    await page.locator(".swagger-ui .info .title").waitFor();
    expect(await page.locator(".swagger-ui .info .title").textContent()).toContain("Inference marketplace API");
    expect(await page.locator(".opblock").count()).toBeGreaterThan(10);
    expect(problems).toEqual([]);
  } finally {
    await context.close();
  }
}, 60_000);
