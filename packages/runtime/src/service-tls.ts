import { readFileSync } from "node:fs";
import { createSecureContext } from "node:tls";
import { credentials, ServerCredentials, type ChannelCredentials } from "@grpc/grpc-js";
import { ConfigError, str } from "./config.ts";

/**
 * The settings of mTLS between the services (docs/deploy.md, "Service identities"). `mtls`, the
 * default, needs the three files: the CA that signs every service's certificate, and this
 * process's own certificate and key (the layout of a kubernetes.io/tls Secret: ca.crt, tls.crt,
 * tls.key). `off` is plaintext with no caller identities: for a developer's own experiments only.
 */
const whenMtls = {
  default: undefined,
  requiredWhen: (env: Record<string, unknown>) => env.TLS_MODE !== "off",
  desc: "required unless TLS_MODE=off",
};
export const tlsSpecs = {
  TLS_MODE: str({ default: "mtls", choices: ["mtls", "off"] }),
  TLS_CA_FILE: str(whenMtls),
  TLS_CERT_FILE: str(whenMtls),
  TLS_KEY_FILE: str(whenMtls),
};

/** A process's TLS material (PEM): the CA it trusts, its certificate and key. */
export interface ServiceTls {
  ca: Buffer;
  cert: Buffer;
  key: Buffer;
}

interface TlsConfig {
  TLS_MODE: string;
  TLS_CA_FILE?: string;
  TLS_CERT_FILE?: string;
  TLS_KEY_FILE?: string;
}

/**
 * Reads the files a loaded config names; null when TLS_MODE=off. Read once at start: a renewed
 * certificate is picked up by a restart (docs/deploy.md, "Rotating certificates").
 */
export function readServiceTls(config: TlsConfig): ServiceTls | null {
  if (config.TLS_MODE === "off") return null;
  const read = (name: "TLS_CA_FILE" | "TLS_CERT_FILE" | "TLS_KEY_FILE") => {
    try {
      return readFileSync(config[name]!);
    } catch (err) {
      throw new ConfigError(
        `invalid configuration:\n  ${name}: cannot read ${config[name]} (${(err as Error).message})`,
      );
    }
  };
  const tls = { ca: read("TLS_CA_FILE"), cert: read("TLS_CERT_FILE"), key: read("TLS_KEY_FILE") };
  try {
    // Fails now, naming the files, rather than at the first handshake.
    createSecureContext(tls);
  } catch (err) {
    throw new ConfigError(
      `invalid configuration:\n  TLS_CERT_FILE, TLS_KEY_FILE, TLS_CA_FILE: not a usable certificate, key and CA (${(err as Error).message})`,
    );
  }
  return tls;
}

/** A gRPC server's credentials: with TLS, only clients presenting a certificate the CA signed get in. */
export function serverCredentials(tls: ServiceTls | null): ServerCredentials {
  if (!tls) return ServerCredentials.createInsecure();
  return ServerCredentials.createSsl(tls.ca, [{ cert_chain: tls.cert, private_key: tls.key }], true);
}

/**
 * A gRPC client's credentials: with TLS, it presents its certificate and accepts only a server
 * whose certificate the CA signed for the host name it dialled (`billing`, `localhost`, …).
 */
export function channelCredentials(tls: ServiceTls | null): ChannelCredentials {
  if (!tls) return credentials.createInsecure();
  return credentials.createSsl(tls.ca, tls.key, tls.cert);
}
