import { describe, expect, it } from "vitest";
import { clientIpKey } from "../src/client-ip-key.ts";

describe("clientIpKey: per-IP limits count an IPv6 /64 as one host", () => {
  it("groups every address of one /64, however it is written", () => {
    const key = "2001:db8:0:1::/64";
    for (const ip of [
      "2001:db8:0:1::1",
      "2001:0db8:0000:0001:ffff:ffff:ffff:ffff",
      "2001:DB8:0:1:a:b:c:d",
      "2001:db8::1:0:0:0:9",
      "2001:db8:0:1::2%eth0",
      " 2001:db8:0:1::3 ",
    ]) {
      expect(clientIpKey(ip), ip).toBe(key);
    }
  });

  it("keeps different /64s apart", () => {
    expect(clientIpKey("2001:db8:0:1::1")).not.toBe(clientIpKey("2001:db8:0:2::1"));
    expect(clientIpKey("::1")).toBe("0:0:0:0::/64");
  });

  it("keeps IPv4 and IPv4-mapped IPv6 addresses per address", () => {
    expect(clientIpKey("192.0.2.1")).toBe("192.0.2.1");
    expect(clientIpKey("::ffff:192.0.2.1")).toBe("192.0.2.1");
    expect(clientIpKey("::ffff:c000:0202")).toBe("192.0.2.2");
    expect(clientIpKey("::ffff:192.0.2.1")).not.toBe(clientIpKey("::ffff:192.0.2.3"));
  });

  it("leaves what is not an IP address as it is", () => {
    expect(clientIpKey("")).toBe("");
    expect(clientIpKey("not-an-ip")).toBe("not-an-ip");
  });
});
