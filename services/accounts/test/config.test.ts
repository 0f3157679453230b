import { describe, expect, it } from "vitest";
import { loadAccountsConfig } from "../src/config.ts";

// Plaintext: these tests are about the other settings (the TLS ones have their own test below).
const plain = { TLS_MODE: "off" };

describe("accounts configuration", () => {
  it("has local defaults", () => {
    const config = loadAccountsConfig(plain);
    expect(config.GRPC_HOST).toBe("127.0.0.1");
    expect(config.GRPC_PORT).toBe(50051);
    expect(config.METRICS_PORT).toBe(9466);
    expect(config.DEFAULT_TIER).toBe("free");
    expect(config.SIGNUP_LIMIT_PER_IP_PER_HOUR).toBe(20);
  });

  it("allows 0 (no limit) and refuses what is not a count", () => {
    expect(loadAccountsConfig({ ...plain, SIGNUP_LIMIT_PER_IP_PER_HOUR: "0" }).SIGNUP_LIMIT_PER_IP_PER_HOUR).toBe(0);
    for (const bad of ["-1", "1.5", "lots", "1000001"]) {
      expect(() => loadAccountsConfig({ ...plain, SIGNUP_LIMIT_PER_IP_PER_HOUR: bad })).toThrow(
        /SIGNUP_LIMIT_PER_IP_PER_HOUR/,
      );
    }
  });

  it("connects to NATS as a user only with both NATS_USER and NATS_PASSWORD, a password the server can read", () => {
    expect(loadAccountsConfig(plain).NATS_USER).toBeUndefined();
    const password = "n0123456789abcdef0123";
    expect(loadAccountsConfig({ ...plain, NATS_USER: "accounts", NATS_PASSWORD: password })).toMatchObject({
      NATS_USER: "accounts",
      NATS_PASSWORD: password,
    });
    expect(() => loadAccountsConfig({ ...plain, NATS_USER: "accounts" })).toThrow(/NATS_PASSWORD/);
    expect(() => loadAccountsConfig({ ...plain, NATS_PASSWORD: password })).toThrow(/NATS_USER/);
    expect(() => loadAccountsConfig({ ...plain, NATS_USER: "acc.ounts", NATS_PASSWORD: password })).toThrow(
      /NATS_USER/,
    );
    // Starting with a digit, or holding `$`, it would be misread by nats-server: refused, never echoed.
    for (const bad of ["0123456789abcdef0123", "n0123$456789abcdef", "short1"]) {
      const error = (() => {
        try {
          loadAccountsConfig({ ...plain, NATS_USER: "accounts", NATS_PASSWORD: bad });
        } catch (err) {
          return String(err);
        }
      })();
      expect(error).toMatch(/NATS_PASSWORD/);
      expect(error).not.toContain(bad);
    }
  });

  it("connects at run time and migrates as two roles when told, never echoing a database password", () => {
    expect(loadAccountsConfig(plain).MIGRATE_DATABASE_URL).toBeUndefined();
    const urls = {
      DATABASE_URL: "postgres://mkt_accounts:p1@db.example.net:5432/marketplace",
      MIGRATE_DATABASE_URL: "postgres://mkt_accounts_owner:p2@db.example.net:5432/marketplace",
    };
    expect(loadAccountsConfig({ ...plain, ...urls })).toMatchObject(urls);
    for (const name of ["DATABASE_URL", "MIGRATE_DATABASE_URL"]) {
      for (const bad of [
        "postgres//u:s3cr3t-value@h/db",
        "mysql://u:s3cr3t-value@h/db",
        "postgres://u:s3cr3t-value@h",
      ]) {
        const error = (() => {
          try {
            loadAccountsConfig({ ...plain, [name]: bad });
          } catch (err) {
            return String(err);
          }
        })();
        expect(error, bad).toMatch(new RegExp(`\\b${name}:`));
        expect(error, bad).not.toContain("s3cr3t-value");
      }
    }
  });

  it("runs mTLS unless told otherwise: the CA, certificate and key files are required", () => {
    expect(() => loadAccountsConfig({})).toThrow(/TLS_CA_FILE[\s\S]*TLS_CERT_FILE[\s\S]*TLS_KEY_FILE/);
    expect(() => loadAccountsConfig({ TLS_MODE: "on" })).toThrow(/TLS_MODE/);
    const files = { TLS_CA_FILE: "/tls/ca.crt", TLS_CERT_FILE: "/tls/tls.crt", TLS_KEY_FILE: "/tls/tls.key" };
    expect(loadAccountsConfig(files)).toMatchObject({ TLS_MODE: "mtls", ...files });
  });
});
