import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomToken } from "@mkt/runtime/ids";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { checkPage, launchChromium, openPortal, VIEWPORTS, type ViewportName } from "./portal-browser.ts";
import { startSystem, type RunningSystem } from "./system.ts";

// The portal's customer story (docs/portal.md#tests), in a real browser against the whole stack:
// sign up → balance 5.00 → create key → playground answer streams → usage chart shows it →
// subscribe → cancel.
let system: RunningSystem;
let hoster: RegisteredHoster;
let browser: Browser;
const PLAN = "Starter";

/** The id and `include_usage` chunk of the playground's streamed answer, as the browser received it. */
function answerOf(sse: string) {
  const chunks = sse
    .split("\n")
    .filter((line) => line.startsWith("data: {"))
    .map((line) => JSON.parse(line.slice(6)) as { id: string; usage?: Record<string, number> | null });
  const final = chunks.find((c) => c.usage);
  expect(final?.usage, "the stream's usage chunk").toBeDefined();
  const { prompt_tokens, completion_tokens, cost } = final!.usage!;
  return { id: final!.id, prompt_tokens: prompt_tokens!, completion_tokens: completion_tokens!, cost: cost! };
}

/** In the page, with the session: GET /v1/generations/{id}'s cost_usd, or null until it settles. */
async function generationCost(id: string): Promise<number | null> {
  const response = await fetch(`/v1/generations/${id}`);
  return response.ok ? ((await response.json()) as { cost_usd: number }).cost_usd : null;
}

beforeAll(async () => {
  [system, browser] = await Promise.all([startSystem(), launchChromium()]);
  hoster = await registerHoster(system, { name: "Acme GPUs" });
  const plan = await fetch(`${system.url}/hosters/products`, {
    method: "POST",
    headers: { cookie: hoster.cookie, "content-type": "application/json" },
    body: JSON.stringify({ name: PLAN, pricing_model: "subscription", monthly_price_usd: 1, included_tokens: 100_000 }),
  });
  expect(plan.status).toBe(201);
}, 90_000);
afterAll(async () => {
  await browser?.close();
  await hoster?.server.close();
  await system?.close();
});

describe.each(Object.keys(VIEWPORTS) as ViewportName[])("the customer story at %s width", (width) => {
  it("signs up, sees 5.00, makes a key, chats, sees the usage chart, subscribes and cancels", async () => {
    const { context, page, problems } = await openPortal(browser, system.url, width);
    const shot = (name: string) => checkPage(page, `customer-${width}-${name}`);
    try {
      await page.goto("/portal/");
      await page.getByRole("heading", { name: "Log in" }).waitFor();
      await shot("1-login");

      await page.getByRole("link", { name: "Create a customer account" }).click();
      await page.getByLabel("E-mail").fill(`portal-${randomToken(6)}@example.com`);
      await page.getByLabel("Password").fill("correct horse battery staple");
      await shot("2-signup");
      await page.getByRole("button", { name: "Create account" }).click();
      await expect.poll(() => page.getByTestId("secret").textContent(), { timeout: 10_000 }).toMatch(/^mk_/);
      await shot("3-signup-key");
      await page.getByRole("button", { name: "I have saved it" }).click();
      await expect.poll(() => page.getByTestId("balance").textContent()).toBe("$5.00");
      await shot("4-overview");

      await page.getByRole("link", { name: "API keys" }).click();
      await page.getByLabel("Name of the new key").fill("laptop");
      await page.getByRole("button", { name: "Create key" }).click();
      await expect.poll(() => page.getByTestId("secret").textContent(), { timeout: 10_000 }).toMatch(/^mk_/);
      await expect.poll(() => page.getByRole("cell", { name: "laptop", exact: true }).count()).toBe(1);
      await shot("5-keys");

      await page.getByRole("link", { name: "Playground" }).click();
      await page.getByLabel("Message").fill("Tell me a short story.");
      const streamed = page.waitForResponse((r) => r.url().endsWith("/v1/chat/completions"));
      await page.getByRole("button", { name: "Send" }).click();
      const answer = answerOf(await (await streamed).text());
      expect(answer.cost).toBeGreaterThan(0);
      // The cost shown is the answer's own usage.cost, to the micro-dollar, with its tokens.
      await expect
        .poll(() => page.getByTestId("answer-usage").textContent(), { timeout: 15_000 })
        .toMatch(`${answer.prompt_tokens} tokens in, ${answer.completion_tokens} tokens out · cost $`);
      const shown = /cost \$([\d,.]+)$/.exec((await page.getByTestId("answer-usage").textContent())!)![1]!;
      expect(Number(shown.replaceAll(",", ""))).toBe(answer.cost);
      expect((await page.getByTestId("answer").textContent())!.length).toBeGreaterThan(5);
      await shot("6-playground");
      // Once settled, the generation records the same cost as charged.
      await expect.poll(() => page.evaluate(generationCost, answer.id), { timeout: 15_000 }).toBe(answer.cost);
      // The playground's key is listed as this session's.
      await page.getByRole("link", { name: "API keys" }).click();
      await expect.poll(() => page.getByText("Playground, ends with the session").count()).toBe(1);

      // Settlement is asynchronous (JetStream): wait for the request to count, then look.
      await expect
        .poll(
          () =>
            page.evaluate(async () => {
              const usage = (await (await fetch("/v1/usage")).json()) as { usage_30d: { total_requests: number } };
              return usage.usage_30d.total_requests;
            }),
          { timeout: 15_000 },
        )
        .toBe(1);
      await page.getByRole("link", { name: "Usage" }).click();
      await page.locator("figure.chart canvas").first().waitFor();
      await expect.poll(() => page.getByRole("cell", { name: "local", exact: true }).count()).toBe(1);
      await shot("7-usage");

      await page.getByRole("link", { name: "Hosters" }).click();
      await page
        .getByRole("button", { name: `Subscribe to ${PLAN}` })
        .first()
        .click();
      await expect.poll(() => page.getByTestId("secret").textContent(), { timeout: 10_000 }).toMatch(/^mk_/);
      await shot("8-hosters-subscribed");

      await page.getByRole("link", { name: "Subscriptions" }).click();
      await expect.poll(() => page.getByText("active", { exact: true }).count()).toBe(1);
      await shot("9-subscriptions");
      await page.getByRole("button", { name: `Cancel ${PLAN}` }).click();
      await expect.poll(() => page.getByText("cancelled", { exact: true }).count()).toBe(1);
      await shot("10-cancelled");

      await page.getByRole("button", { name: "Log out" }).click();
      await page.getByRole("heading", { name: "Log in" }).waitFor();
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  }, 90_000);
});
