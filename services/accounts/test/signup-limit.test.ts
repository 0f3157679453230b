import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { clientIpKey } from "../src/client-ip-key.ts";
import { rejection, startTestAccounts, uniqueEmail, uniqueIp, type TestAccounts } from "./accounts-harness.ts";

let t: TestAccounts;
// 15 minutes and half a second into a UTC hour: the window resets in 2700 s (rounded up).
let now = new Date("2026-11-23T10:15:00.500Z");
beforeAll(async () => {
  t = await startTestAccounts({ SIGNUP_LIMIT_PER_IP_PER_HOUR: "3", DEFAULT_TIER: "starter" }, { clock: () => now });
});
afterAll(async () => {
  await t?.close();
});

const signUp = (clientIp: string, password = "long enough") =>
  t.client.createAccount({ email: uniqueEmail(), password, clientIp });

describe("per-IP sign-up limit", () => {
  it("counts every attempt, failed ones included, and refuses the 4th in the hour", async () => {
    const ip = uniqueIp();
    const first = await signUp(ip);
    expect(first.account!.tier).toBe("starter"); // DEFAULT_TIER
    await signUp(ip);
    expect(await rejection(signUp(ip, "short"))).toMatchObject({ code: "invalid_request", param: "password" });

    const err = await rejection(signUp(ip));
    expect(err).toBeInstanceOf(AppError);
    expect(err).toMatchObject({ code: "rate_limit_exceeded", headers: { "retry-after": "2700" } });
    expect((err as AppError).httpStatus).toBe(429);

    // Another address is not affected.
    await signUp(uniqueIp());

    const [row] = await t.query<{ attempts: number }>(
      `select attempts from ip_attempts where purpose = 'signup' and client_ip = $1`,
      [clientIpKey(ip)], // an IPv6 address counts as its /64
    );
    expect(row?.attempts).toBe(4);
  });

  it("admits the address again in the next UTC hour and prunes windows long past", async () => {
    const ip = uniqueIp();
    for (let i = 0; i < 3; i++) await signUp(ip);
    await expect(signUp(ip)).rejects.toMatchObject({ code: "rate_limit_exceeded" });

    now = new Date("2026-11-23T11:00:00.000Z");
    await signUp(ip);

    now = new Date("2026-11-23T12:59:59.250Z");
    const err = await rejection(Promise.all([signUp(ip), signUp(ip), signUp(ip), signUp(ip)]));
    expect(err).toMatchObject({ code: "rate_limit_exceeded", headers: { "retry-after": "1" } });
    // 12:00's pruning dropped 10:00 and kept 11:00 (a replica running behind may still count there).
    const windows = await t.query<{ hour: number }>(
      `select distinct extract(hour from window_start at time zone 'UTC')::int as hour from ip_attempts order by 1`,
    );
    expect(windows.map((w) => w.hour)).toEqual([11, 12]);
  });

  it("is off when set to 0", async () => {
    const unlimited = await startTestAccounts({ SIGNUP_LIMIT_PER_IP_PER_HOUR: "0" });
    try {
      const ip = uniqueIp();
      for (let i = 0; i < 5; i++) {
        await unlimited.client.createAccount({ email: uniqueEmail(), password: "long enough", clientIp: ip });
      }
      expect(await unlimited.query(`select * from ip_attempts`)).toEqual([]);
    } finally {
      await unlimited.close();
    }
  });
});
