import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomToken } from "@mkt/runtime/ids";
import { startSystem, type RunningSystem } from "./system.ts";

// Per-IP limits count an IPv6 /64 as one host (it can pick any of 2^64 addresses), while IPv4
// addresses stay apart. The client address comes from X-Forwarded-For, which the edge honours
// because the test's loopback hop is a configured trusted proxy.

const SIGNUPS_PER_IP_PER_HOUR = 20; // accounts' default SIGNUP_LIMIT_PER_IP_PER_HOUR

let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem({ edge: { TRUSTED_PROXIES: "127.0.0.1" } });
});
afterAll(async () => {
  await system?.close();
});

async function signUpFrom(clientIp: string): Promise<number> {
  const res = await fetch(`${system.url}/v1/accounts`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-forwarded-for": clientIp },
    body: JSON.stringify({ email: `ip-${randomToken(8)}@example.com`, password: "correct horse battery staple" }),
  });
  await res.arrayBuffer();
  return res.status;
}

describe("per-IP sign-up limit and IPv6", () => {
  it("two addresses in one /64 share the limit; another /64 and IPv4 neighbours do not", async () => {
    // Alternate two addresses of one /64: together they use up one budget.
    const statuses: number[] = [];
    for (let i = 0; i < SIGNUPS_PER_IP_PER_HOUR; i++) {
      statuses.push(await signUpFrom(i % 2 === 0 ? "2001:db8:77:1::1" : "2001:db8:77:1:dead:beef:0:42"));
    }
    expect(statuses.every((s) => s === 201)).toBe(true);
    expect(await signUpFrom("2001:db8:77:1::9999")).toBe(429);
    // The next /64 is another host.
    expect(await signUpFrom("2001:db8:77:2::1")).toBe(201);
  });

  it("IPv4 and IPv4-mapped IPv6 addresses count one by one", async () => {
    for (let i = 0; i < SIGNUPS_PER_IP_PER_HOUR; i++) expect(await signUpFrom("198.51.100.7")).toBe(201);
    expect(await signUpFrom("::ffff:198.51.100.7")).toBe(429); // the same client, seen by a dual-stack socket
    expect(await signUpFrom("198.51.100.8")).toBe(201);
  });
});
