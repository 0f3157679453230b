import { readFileSync } from "node:fs";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { checkPage, launchChromium, openPortal, tabTo, VIEWPORTS, type ViewportName } from "./portal-browser.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// What the two stories do not walk through, in the same browser against the whole stack: the
// wrong password and the second subscription refused in words, the main navigation by keyboard
// only, the rate limits on the overview, revoking a key, the usage ranges, the CSV download,
// archiving a plan, and a playground answer cut short before its usage. The same checks as the
// stories on every page (axe, no sideways scroll, no console error), at both widths (the cut-short
// answer at desktop width only: what it checks does not depend on the width).
let system: RunningSystem;
let hoster: RegisteredHoster;
let browser: Browser;
const PLAN = "Starter";
const PASSWORD = "correct horse battery staple"; // signUp's
const CSV_HEADER =
  "timestamp,model,provider,input_tokens,output_tokens,total_tokens,cost_usd,latency_ms,success,cached_tokens";

beforeAll(async () => {
  [system, browser] = await Promise.all([startSystem(), launchChromium()]);
  hoster = await registerHoster(system, { name: "Acme GPUs" });
  expect(await createPlan(PLAN)).toBe(201);
}, 90_000);
afterAll(async () => {
  await browser?.close();
  await hoster?.server.close();
  await system?.close();
});

async function createPlan(name: string): Promise<number> {
  const res = await fetch(`${system.url}/hosters/products`, {
    method: "POST",
    headers: { cookie: hoster.cookie, "content-type": "application/json" },
    body: JSON.stringify({ name, pricing_model: "subscription", monthly_price_usd: 1, included_tokens: 100_000 }),
  });
  return res.status;
}

async function chat(apiKey: string): Promise<number> {
  const res = await fetch(`${system.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "auto", messages: [{ role: "user", content: "hi" }], max_tokens: 8 }),
  });
  await res.body?.cancel();
  return res.status;
}

const WIDTHS = Object.keys(VIEWPORTS) as ViewportName[];

describe.each(WIDTHS)("a customer at %s width", (width) => {
  it("is told a wrong password, tabs through the menu, reads the limits, revokes a key, switches ranges, downloads the CSV and is told of a second subscription", async () => {
    const customer = await signUp(system.url);
    expect(await chat(customer.apiKey)).toBe(200);
    const { context, page, problems, expectFailedLoad } = await openPortal(browser, system.url, width);
    const shot = (name: string) => checkPage(page, `details-customer-${width}-${name}`);
    try {
      // A wrong password is refused in words.
      await page.goto("/portal/");
      await page.getByLabel("E-mail").fill(customer.email);
      await page.getByLabel("Password").fill("not the password");
      expectFailedLoad("/auth/login", 401);
      await page.getByRole("button", { name: "Log in" }).click();
      await expect
        .poll(() => page.getByRole("alert").textContent())
        .toBe("That e-mail and password do not match an account.");
      await shot("1-login-refused");
      await page.getByLabel("Password").fill(PASSWORD);
      await page.getByRole("button", { name: "Log in" }).click();
      await page.getByTestId("balance").waitFor();

      // The rate limits: what the API says, as the overview shows it. The counts trail admission
      // by at most one heartbeat of the edge's lease (docs/leases.md), so they are read once the
      // request made above shows.
      const readLimits = async () =>
        (await page.evaluate(async () => {
          const usage = (await (await fetch("/v1/usage")).json()) as { rate_limits: Record<string, number> };
          return usage.rate_limits;
        })) as Record<string, number>;
      await expect.poll(async () => (await readLimits()).requests_today, { timeout: 15_000 }).toBeGreaterThanOrEqual(1);
      await page.reload();
      await page.getByTestId("balance").waitFor();
      const limits = await readLimits();
      const today = page.locator(".stat", { hasText: "Requests today (UTC)" });
      const minute = page.locator(".stat", { hasText: "Requests this minute" });
      const figures = (n: number) => n.toLocaleString("en-US");
      await expect
        .poll(() => today.locator(".stat-value").textContent())
        .toBe(`${figures(limits.remaining_today!)} left`);
      expect(await today.locator(".stat-note").textContent()).toBe(
        `${figures(limits.requests_today!)} of ${figures(limits.limit_per_day!)} used`,
      );
      // The minute's figures may have rolled over since: they add up to the minute's limit.
      const [, used, limit] = /^(\d+) of ([\d,]+) used$/.exec((await minute.locator(".stat-note").textContent())!)!;
      expect(limit).toBe(figures(limits.limit_per_minute!));
      expect(await minute.locator(".stat-value").textContent()).toBe(
        `${figures(limits.limit_per_minute! - Number(used))} left`,
      );
      await shot("2-overview");

      // The main navigation by keyboard alone: Tab from the top of the page, Enter follows.
      await page.reload();
      await page.getByTestId("balance").waitFor();
      expect(await tabTo(page, "Skip to content")).toBe(1);
      await tabTo(page, "API keys");
      await page.keyboard.press("Enter");
      await page.getByRole("heading", { name: "API keys" }).waitFor();
      expect(new URL(page.url()).pathname).toBe("/portal/keys");
      // Focus moved to the new page's heading (a screen reader announces it); the menu is behind it.
      expect(await page.evaluate("document.activeElement?.tagName")).toBe("H1");
      expect(await tabTo(page, "Usage", { backwards: true })).toBe(6);
      await page.keyboard.press("Enter");
      await page.getByRole("heading", { name: "Usage" }).waitFor();
      expect(new URL(page.url()).pathname).toBe("/portal/usage");

      // Revoking a key: it says so, and the key is refused from then on.
      await page.getByRole("link", { name: "API keys" }).click();
      await page.getByLabel("Name of the new key").fill("spare");
      await page.getByRole("button", { name: "Create key" }).click();
      await expect.poll(() => page.getByTestId("secret").textContent(), { timeout: 10_000 }).toMatch(/^mk_/);
      const spare = (await page.getByTestId("secret").textContent())!;
      await page.getByRole("button", { name: "I have saved it" }).click();
      expect(await chat(spare)).toBe(200);
      await page.getByRole("button", { name: "Revoke spare" }).click(); // the confirmation is accepted
      await expect.poll(() => page.getByText(/^Revoked /).count()).toBe(1);
      expect(await page.getByRole("button", { name: "Revoke spare" }).count()).toBe(0);
      await expect.poll(() => chat(spare)).toBe(401);
      await shot("3-keys-revoked");

      // The usage ranges: each asks for its own range and draws it; the CSV follows the range.
      await expect
        .poll(
          () =>
            page.evaluate(async () => {
              const usage = (await (await fetch("/v1/usage")).json()) as { usage_30d: { total_requests: number } };
              return usage.usage_30d.total_requests;
            }),
          { timeout: 15_000 },
        )
        .toBe(2);
      await page.getByRole("link", { name: "Usage" }).click();
      await page.locator("figure.chart canvas").first().waitFor();
      for (const [days, label, interval] of [
        [1, "24 hours", "hour"],
        [7, "7 days", "day"],
        [90, "90 days", "day"],
      ] as const) {
        const answer = page.waitForResponse((r) =>
          r.url().endsWith(`/v1/usage/tokens?days=${days}&interval=${interval}`),
        );
        await page.locator(".segmented label", { hasText: label }).click();
        expect((await answer).status()).toBe(200);
        expect(await page.getByRole("radio", { name: label }).isChecked()).toBe(true);
        await expect
          .poll(() => page.getByRole("link", { name: "Download CSV" }).getAttribute("href"))
          .toBe(`/v1/usage/export?days=${days}`);
        await page.locator("figure.chart canvas").first().waitFor();
        await expect.poll(() => page.locator("figure.chart").first().textContent()).toMatch(/Input tokens: [1-9]/);
        if (days === 1) await shot("4-usage-24-hours");
      }
      await shot("5-usage-90-days");

      const [download] = await Promise.all([
        page.waitForEvent("download"),
        page.getByRole("link", { name: "Download CSV" }).click(),
      ]);
      expect(download.suggestedFilename()).toBe("usage-90d.csv");
      const lines = readFileSync((await download.path())!, "utf8")
        .trim()
        .split(/\r?\n/);
      expect(lines[0]).toBe(CSV_HEADER);
      expect(lines).toHaveLength(3); // the two requests
      expect(lines[1]).toContain(",local,");

      // A second subscription to the same plan is refused, in words, on that plan.
      await page.getByRole("link", { name: "Hosters" }).click();
      await page.getByRole("button", { name: `Subscribe to ${PLAN}` }).click();
      await expect.poll(() => page.getByTestId("secret").textContent(), { timeout: 10_000 }).toMatch(/^mk_/);
      await page.getByRole("button", { name: "I have saved it" }).click();
      expectFailedLoad("/v1/subscriptions", 409);
      await page.getByRole("button", { name: `Subscribe to ${PLAN}` }).click();
      await expect
        .poll(() => page.locator("li.plan", { hasText: PLAN }).getByRole("alert").textContent())
        .toBe("You already have a subscription to this plan; cancel it before subscribing again.");
      await shot("6-already-subscribed");

      await page.getByRole("button", { name: "Log out" }).click();
      await page.getByRole("heading", { name: "Log in" }).waitFor();
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  }, 90_000);
});

describe("a first visit, logged out", () => {
  it("logs no console error: nobody logged in is a 200 from GET /auth/session", async () => {
    const { context, page, problems } = await openPortal(browser, system.url, "desktop");
    try {
      const probe = page.waitForResponse((res) => new URL(res.url()).pathname === "/auth/session");
      await page.goto("/portal/");
      expect((await probe).status()).toBe(200);
      await page.getByRole("button", { name: "Log in" }).waitFor();
      await page.waitForLoadState("networkidle");
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  }, 60_000);
});

describe("a playground answer cut short", () => {
  it("shows no cost of its own and points at the Usage page", async () => {
    const customer = await signUp(system.url);
    const { context, page, problems } = await openPortal(browser, system.url, "desktop");
    try {
      // The edge's real answer, with the connection ending before its usage chunk arrives.
      await page.route("**/v1/chat/completions", async (route) => {
        const answer = await route.fetch();
        const sse = await answer.text();
        const usageAt = sse.indexOf('"usage":{');
        expect(usageAt).toBeGreaterThan(0);
        await route.fulfill({ response: answer, body: sse.slice(0, sse.lastIndexOf("data:", usageAt)) });
      });
      await page.goto("/portal/");
      await page.getByLabel("E-mail").fill(customer.email);
      await page.getByLabel("Password").fill(PASSWORD);
      await page.getByRole("button", { name: "Log in" }).click();
      await page.getByTestId("balance").waitFor();
      await page.getByRole("link", { name: "Playground", exact: true }).click();
      await page.getByRole("button", { name: "Send" }).click();
      await expect
        .poll(() => page.getByTestId("answer-usage").textContent(), { timeout: 15_000 })
        .toBe(
          "This answer was cut short before its usage arrived; its cost will appear under Usage once it is settled (seconds).",
        );
      await checkPage(page, "details-customer-desktop-playground-cut-short");
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  }, 60_000);
});

// After the customers above: the hoster's Starter plan has their two subscriptions.
describe.each(WIDTHS)("a hoster at %s width", (width) => {
  it("logs in, tabs to Plans, archives a plan, and reads each subscriber's figures", async () => {
    const legacy = `Legacy ${width}`;
    expect(await createPlan(legacy)).toBe(201);
    const { context, page, problems } = await openPortal(browser, system.url, width);
    const shot = (name: string) => checkPage(page, `details-hoster-${width}-${name}`);
    try {
      await page.goto("/portal/");
      await page.getByRole("radio", { name: "hoster" }).check();
      await page.getByLabel("E-mail").fill(hoster.email);
      await page.getByLabel("Password").fill(hoster.password);
      await page.getByRole("button", { name: "Log in" }).click();
      await page.getByRole("heading", { name: "Your server" }).waitFor();
      await page.reload();
      await page.getByRole("heading", { name: "Your server" }).waitFor();
      await tabTo(page, "Plans");
      await page.keyboard.press("Enter");
      await page.getByRole("heading", { name: "Plans", exact: true }).waitFor();

      // Archiving: the plan says so, cannot be edited, and customers no longer see it.
      const card = page.locator("li.plan", { hasText: legacy });
      await page.getByRole("button", { name: `Archive ${legacy}` }).click(); // the confirmation is accepted
      await expect.poll(() => card.locator(".badge").textContent()).toBe("archived");
      expect(await card.getByRole("button").count()).toBe(0);
      const customer = await signUp(system.url);
      const listed = (await (
        await fetch(`${system.url}/v1/hosters`, { headers: { authorization: `Bearer ${customer.apiKey}` } })
      ).json()) as { data: Array<{ plans: Array<{ name: string }> }> };
      const names = listed.data.flatMap((h) => h.plans.map((p) => p.name));
      expect(names).toContain(PLAN);
      expect(names).not.toContain(legacy);
      await shot("1-plan-archived");

      // Subscribers: two on Starter, said in the plural; on a phone every figure keeps its label.
      await page.getByRole("link", { name: "Subscribers" }).click();
      await expect
        .poll(() => page.getByRole("heading", { name: new RegExp(`^${PLAN} `) }).textContent())
        .toMatch(/· 2 subscribers · earned \$1\.60$/);
      const label = page.locator("td .cell-label", { hasText: "Requests" }).first();
      expect(await label.isVisible()).toBe(width === "phone");
      await shot("2-subscribers");

      await page.getByRole("button", { name: "Log out" }).click();
      await page.getByRole("heading", { name: "Log in" }).waitFor();
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  }, 90_000);
});
