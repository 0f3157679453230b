import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAdversarialUpstream } from "../../services/registry/test/fixtures/adversarial-upstream.ts";
import { waitFor } from "../../services/registry/test/registry-harness.ts";
import { apiCall } from "./api-call.ts";
import { postChat } from "./billing-db.ts";
import { registerOpenHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { checkPage, launchChromium, openPortal, VIEWPORTS, type ViewportName } from "./portal-browser.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// The portal's Models page in a real browser (docs/portal.md#tests): a customer compares the
// endpoints of an open model (prices, uptime by hour, latency, verification) served by two hosters,
// one of which fails every request.
const MODEL = "acme/compare-8b";
let system: RunningSystem;
let browser: Browser;
let adversarial: Awaited<ReturnType<typeof startAdversarialUpstream>>;
let customer: { apiKey: string; email: string };
const hosters: RegisteredHoster[] = [];

async function openHoster(name: string, price: number, modelId?: string) {
  const hoster = await registerOpenHoster(system, {
    name,
    canonicalId: MODEL,
    modelId,
    quantization: modelId ? "fp8" : "q4_k_m",
    onServer: modelId ? adversarial : undefined,
    plan: { input_price_per_1m_usd: price, output_price_per_1m_usd: price },
  });
  hosters.push(hoster);
  return hoster;
}

beforeAll(async () => {
  adversarial = await startAdversarialUpstream();
  [system, browser] = await Promise.all([startSystem(), launchChromium()]);
  customer = await signUp(system.url);
  await openHoster("Steady GPUs", 0.2);
  const failing = await openHoster("Failing GPUs", 0.1, "status-500");
  // Traffic for the figures: the steady hoster answers, the failing one fails every request.
  for (const only of ["Steady GPUs", "Failing GPUs"]) {
    await waitFor(
      () =>
        postChat(system.url, customer.apiKey, {
          model: MODEL,
          n: 2,
          messages: [{ role: "user", content: "hi" }],
          provider: { only: [only] },
        }),
      (res) => res.status === 400,
    );
    for (let i = 0; i < 3; i++) {
      const res = await postChat(system.url, customer.apiKey, {
        model: MODEL,
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 8,
        provider: { only: [only] },
      });
      await res.text();
    }
  }
  await waitFor(
    () => apiCall(system.url, "GET", `/v1/models/${MODEL}/endpoints`, { key: customer.apiKey }),
    (res) =>
      (
        res.body.data as { endpoints: Array<{ hoster_id: string; stats: { last_30m: { faults: number } } }> }
      ).endpoints.some((e) => e.hoster_id === failing.hosterId && e.stats.last_30m.faults === 3),
  );
  // Two verification rounds: the failing hoster's probes fail (degraded), the steady one's pass.
  await system.verifyNow();
  await system.verifyNow();
}, 90_000);
afterAll(async () => {
  await browser?.close();
  for (const hoster of hosters) await hoster.server.close();
  await system?.close();
  await adversarial?.close();
});

describe.each(Object.keys(VIEWPORTS) as ViewportName[])("the Models page at %s width", (width) => {
  it("lists the open model and compares its endpoints: prices, uptime by hour, verification", async () => {
    const { context, page, problems } = await openPortal(browser, system.url, width);
    try {
      await page.goto("/portal/");
      await page.getByLabel("E-mail").fill(customer.email);
      await page.getByLabel("Password").fill("correct horse battery staple");
      await page.getByRole("button", { name: "Log in" }).click();
      await page.getByRole("link", { name: "Models" }).click();
      await page.getByRole("heading", { name: "Open models" }).waitFor();
      await page.getByRole("button", { name: MODEL }).waitFor();
      await page.getByText("2 endpoints, from $0.10 / $0.10 per 1M tokens").waitFor();
      const table = page.getByRole("region", { name: `Endpoints of ${MODEL}` });
      await table.getByText("Steady GPUs").waitFor();
      await table.getByText("Failing GPUs").waitFor();
      // The failing hoster's hour is red, and its bars say so in words.
      // (An hour's turn between the requests and the page may add an hour to each.)
      await table
        .getByRole("img", { name: /Failing GPUs uptime: [12] of the last 24 hours had requests; [12] below 80%/ })
        .waitFor();
      await table
        .getByRole("img", { name: /Steady GPUs uptime: [12] of the last 24 hours had requests; 0 below 80%/ })
        .waitFor();
      // Verification: the steady hoster verified, the failing one degraded, with what failed.
      await table.getByText("verified", { exact: true }).waitFor();
      await table.getByText("degraded", { exact: true }).waitFor();
      await table.getByText(/^ failed: /).waitFor();
      expect(await table.getByText("0.0%", { exact: true }).count()).toBe(1);
      expect(await table.getByText("100.0%", { exact: true }).count()).toBe(1);
      await checkPage(page, `models-${width}`);
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});
