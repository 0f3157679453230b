import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomToken } from "@mkt/runtime/ids";
import { createInvite } from "./hoster-fixture.ts";
import { checkPage, launchChromium, openPortal, VIEWPORTS, type ViewportName } from "./portal-browser.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";
import { startRealHoster } from "../../services/registry/test/hoster-servers.ts";

// The portal's hoster story (docs/portal.md#tests), in a real browser against the whole stack:
// register with an invite against a test hoster server → create a plan → a customer subscribes →
// pause → the customer's key gets the pause message → resume → earnings show the fee.
let system: RunningSystem;
let browser: Browser;
const servers: Array<{ close(): Promise<void> }> = [];

beforeAll(async () => {
  [system, browser] = await Promise.all([startSystem(), launchChromium()]);
}, 90_000);
afterAll(async () => {
  await browser?.close();
  for (const server of servers) await server.close();
  await system?.close();
});

const PAUSED = "Your access has been temporarily paused by the hoster.";

async function chat(apiKey: string) {
  const res = await fetch(`${system.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "auto", messages: [{ role: "user", content: "hi" }], max_tokens: 8 }),
  });
  return { status: res.status, body: (await res.json()) as { error?: { message: string } } };
}

describe.each(Object.keys(VIEWPORTS) as ViewportName[])("the hoster story at %s width", (width) => {
  it("registers, publishes a plan, pauses and resumes a subscriber, and sees the fee earned", async () => {
    const modelId = `llama-${randomToken(4)}.gguf`;
    const server = await startRealHoster({ models: [modelId] });
    servers.push(server);
    const plan = `Pro ${width}`;
    const { context, page, problems, expectFailedLoad } = await openPortal(browser, system.url, width);
    const shot = (name: string) => checkPage(page, `hoster-${width}-${name}`);
    try {
      await page.goto("/portal/");
      await page.getByRole("link", { name: "register as a hoster" }).click();
      await page.getByLabel("Invite code").fill(await createInvite(system));
      await page.getByLabel("Hoster name").fill(`GPU Barn ${width}`);
      await page.getByLabel("Contact e-mail").fill(`hoster-${randomToken(6)}@example.com`);
      await page.getByLabel("Portal password (optional)").fill("hoster password 123");
      await page.getByLabel("Server address").fill(server.url);
      await page.getByLabel("Model file name").fill(modelId);
      await page.getByLabel("Model display name").fill("Llama 3 8B");
      await page.getByLabel("Public model name").fill("meta-llama/Meta-Llama-3-8B-Instruct");
      await page.getByLabel("Quantization").fill("Q4_K_M");
      // A wrong token first: the server's refusal comes back as the registration's own message.
      await page.getByLabel("Server token").fill("not-the-token");
      expectFailedLoad("/hosters/register", 400);
      await page.getByRole("button", { name: "Register" }).click();
      await expect.poll(() => page.getByRole("alert").textContent()).toMatch(/token|refused|401|models/i);
      await shot("1-register-refused");
      await page.getByLabel("Server token").fill(server.token);
      await page.getByRole("button", { name: "Register" }).click();
      await page.getByRole("heading", { name: "Your server" }).waitFor();
      await expect.poll(() => page.getByText(modelId).count()).toBeGreaterThan(0);
      await page.getByText("meta-llama/Meta-Llama-3-8B-Instruct").waitFor();
      await page.getByText("(q4_k_m)").waitFor();
      await shot("2-profile");

      await page.getByRole("link", { name: "Plans" }).click();
      // An open pay-as-you-go plan first: the form says what open means, the list marks it.
      await page.getByRole("button", { name: "New plan" }).click();
      await page.getByLabel("Plan name").fill(`Open ${width}`);
      await page.getByLabel("Pricing model").selectOption("payg");
      await page.getByLabel("Input price per 1M tokens (USD)").fill("0.1");
      await page.getByLabel("Open to every customer").check();
      await page.getByRole("button", { name: "Create plan" }).click();
      await page.getByRole("heading", { name: `Open ${width} active open` }).waitFor();

      await page.getByRole("button", { name: "New plan" }).click();
      await page.getByLabel("Plan name").fill(plan);
      await page.getByLabel("Pricing model").selectOption("subscription");
      await page.getByLabel("Monthly price (USD)").fill("2");
      await page.getByLabel("Included tokens per month").fill("100000");
      await shot("3-new-plan");
      await page.getByRole("button", { name: "Create plan" }).click();
      await page.getByRole("heading", { name: plan }).waitFor();
      await page.getByRole("button", { name: `Edit ${plan}` }).click();
      await page.getByText("Existing subscribers keep the terms they bought").waitFor();
      await shot("4-plans-edit");

      // A customer subscribes through the API, as any client would.
      const customer = await signUp(system.url);
      const hosters = (await (
        await fetch(`${system.url}/v1/hosters`, { headers: { authorization: `Bearer ${customer.apiKey}` } })
      ).json()) as { data: Array<{ plans: Array<{ product_id: string; name: string }> }> };
      const productId = hosters.data.flatMap((h) => h.plans).find((p) => p.name === plan)!.product_id;
      const sub = await fetch(`${system.url}/v1/subscriptions`, {
        method: "POST",
        headers: { authorization: `Bearer ${customer.apiKey}`, "content-type": "application/json" },
        body: JSON.stringify({ product_id: productId }),
      });
      expect(sub.status).toBe(201);
      const scopedKey = ((await sub.json()) as { api_key: string }).api_key;
      expect((await chat(scopedKey)).status).toBe(200);

      await page.getByRole("link", { name: "Subscribers" }).click();
      await page.getByRole("button", { name: /^Pause / }).click();
      await page.getByRole("button", { name: /^Resume / }).waitFor();
      expect(await page.getByRole("heading", { name: new RegExp(`^${plan} `) }).textContent()).toMatch(
        /· 1 subscriber · earned/,
      );
      await shot("5-subscriber-paused");
      const paused = await chat(scopedKey);
      expect(paused.status).toBe(403);
      expect(paused.body.error?.message).toBe(PAUSED);

      await page.getByRole("button", { name: /^Resume / }).click();
      await page.getByRole("button", { name: /^Pause / }).waitFor();
      expect((await chat(scopedKey)).status).toBe(200);

      await page.getByRole("link", { name: "Earnings" }).click();
      await expect.poll(() => page.getByTestId("earned").textContent()).toBe("$1.60"); // 80% of 2.00
      await page.getByRole("cell", { name: plan, exact: true }).waitFor();
      await page.locator("figure.chart canvas").waitFor();
      await shot("6-earnings");

      await page.getByRole("button", { name: "Log out" }).click();
      await page.getByRole("heading", { name: "Log in" }).waitFor();
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  }, 90_000);
});
