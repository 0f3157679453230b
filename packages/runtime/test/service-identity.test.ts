import type { PeerCertificate } from "node:tls";
import { describe, expect, it } from "vitest";
import { callerIdentity } from "../src/service-identity.ts";

const withSans = (subjectaltname: string) => ({ subjectaltname }) as PeerCertificate;

describe("a caller's identity", () => {
  it("is the service its spiffe://marketplace/<service> URI SAN names", () => {
    expect(callerIdentity(withSans("URI:spiffe://marketplace/edge, DNS:edge, IP Address:127.0.0.1"))).toBe("edge");
    expect(callerIdentity(withSans("DNS:billing, URI:spiffe://marketplace/billing"))).toBe("billing");
  });

  it("is nobody for a certificate without one, another trust domain, an unknown service, or two identities", () => {
    expect(callerIdentity(undefined)).toBeUndefined();
    expect(callerIdentity(withSans("DNS:edge"))).toBeUndefined();
    expect(callerIdentity(withSans("URI:spiffe://elsewhere/edge"))).toBeUndefined();
    expect(callerIdentity(withSans("URI:spiffe://marketplace/admin"))).toBeUndefined();
    expect(callerIdentity(withSans("URI:spiffe://marketplace/edge, URI:spiffe://marketplace/billing"))).toBeUndefined();
  });
});
