import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { assertPublicEndpoint, isForbiddenAddress, parseEndpointUrl } from "@mkt/runtime/endpoint-guard";
import { hosterAgent } from "@mkt/runtime/hoster-connector";

describe("isForbiddenAddress", () => {
  it.each([
    ["127.0.0.1", "loopback"],
    ["::1", "IPv6 loopback"],
    ["10.1.2.3", "RFC 1918"],
    ["172.16.0.1", "RFC 1918"],
    ["192.168.1.1", "RFC 1918"],
    ["fc00::1", "unique local"],
    ["fd00:ec2::254", "AWS IPv6 metadata"],
    ["169.254.169.254", "metadata (link-local)"],
    ["fe80::1", "IPv6 link-local"],
    ["100.64.0.1", "CGNAT"],
    ["100.100.100.200", "Alibaba metadata (CGNAT)"],
    ["0.0.0.0", "unspecified"],
    ["::", "IPv6 unspecified"],
    ["224.0.0.1", "multicast"],
    ["ff02::1", "IPv6 multicast"],
    ["255.255.255.255", "broadcast"],
    ["::ffff:127.0.0.1", "IPv4-mapped loopback"],
    ["::ffff:169.254.169.254", "IPv4-mapped metadata"],
    ["not-an-ip", "not an address"],
  ])("refuses %s (%s)", (address) => {
    expect(isForbiddenAddress(address)).toBe(true);
  });

  it.each(["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"])("allows public %s", (address) => {
    expect(isForbiddenAddress(address)).toBe(false);
  });
});

describe("parseEndpointUrl", () => {
  const param = (raw: string) => {
    try {
      parseEndpointUrl(raw);
      return "accepted";
    } catch (err) {
      return (err as AppError).param;
    }
  };

  it("accepts http(s) URLs and drops a trailing slash", () => {
    expect(parseEndpointUrl("https://models.example.com/").toString()).toBe("https://models.example.com/");
    expect(parseEndpointUrl(" https://example.com/api/ ").pathname).toBe("/api");
  });

  it.each([
    "",
    "not a url",
    "ftp://example.com",
    "file:///etc/passwd",
    "https://user:pass@example.com",
    "https://example.com/?a=1",
    "https://example.com/#x",
    `https://example.com/${"a".repeat(3000)}`,
  ])("refuses %j with param endpoint_url", (raw) => {
    expect(param(raw)).toBe("endpoint_url");
  });
});

describe("assertPublicEndpoint", () => {
  const refusal = async (raw: string, allowPrivate = false) => {
    try {
      await assertPublicEndpoint(parseEndpointUrl(raw), allowPrivate);
      return undefined;
    } catch (err) {
      return err as AppError;
    }
  };

  it.each(["http://127.0.0.1:8090", "http://[::1]:8090", "http://10.0.0.5", "http://169.254.169.254/latest"])(
    "refuses %s without ALLOW_PRIVATE_UPSTREAMS, naming no address",
    async (raw) => {
      const err = await refusal(raw);
      expect(err).toBeInstanceOf(AppError);
      expect(err!.code).toBe("invalid_request");
      expect(err!.param).toBe("endpoint_url");
      expect(err!.message).toMatch(/must be a public address/);
    },
  );

  it("refuses a host name that resolves to loopback (localhost)", async () => {
    const err = await refusal("http://localhost:8090");
    expect(err?.message).toMatch(/must be a public address/);
    expect(err?.message).not.toContain("127.0.0.1");
  });

  it("allows private addresses when ALLOW_PRIVATE_UPSTREAMS is set", async () => {
    expect(await refusal("http://127.0.0.1:8090", true)).toBeUndefined();
    expect(await refusal("http://localhost:8090", true)).toBeUndefined();
  });

  it("allows a public address literal without resolving anything", async () => {
    expect(await refusal("https://8.8.8.8")).toBeUndefined();
  });
});

describe("the hoster agent (connect-time check)", () => {
  let server: Server;
  let port: number;
  let hits = 0;
  beforeAll(async () => {
    server = createServer((_req, res) => {
      hits++;
      res.end("ok");
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise((resolve) => server.close(resolve)));

  // What DNS rebinding looks like from the connector: a name (or address) that was public when it
  // was checked and is loopback when the connection opens.
  it.each(["localhost", "127.0.0.1"])("refuses to connect to %s, before any byte is sent", async (host) => {
    const agent = hosterAgent({ allowPrivate: false, connectTimeoutMs: 1_000 });
    const before = hits;
    await expect(request(`http://${host}:${port}/health`, { dispatcher: agent })).rejects.toMatchObject({
      code: "ERR_FORBIDDEN_UPSTREAM_ADDRESS",
    });
    expect(hits).toBe(before);
    await agent.close();
  });

  it("connects to loopback when private upstreams are allowed", async () => {
    const agent = hosterAgent({ allowPrivate: true, connectTimeoutMs: 1_000 });
    const response = await request(`http://localhost:${port}/health`, { dispatcher: agent });
    expect(response.statusCode).toBe(200);
    await response.body.text();
    await agent.close();
  });
});
