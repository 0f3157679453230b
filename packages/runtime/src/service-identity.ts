import type { PeerCertificate } from "node:tls";

/** The processes that call each other over gRPC, each with a certificate of its own. */
export const SERVICE_NAMES = ["edge", "accounts", "billing", "registry"] as const;

export type ServiceName = (typeof SERVICE_NAMES)[number];

/** The SPIFFE trust domain of the services' certificates (docs/deploy.md, "Service identities"). */
export const TRUST_DOMAIN = "marketplace";

/** The URI SAN that names a service: `spiffe://marketplace/<service>`. */
export function spiffeId(service: ServiceName): string {
  return `spiffe://${TRUST_DOMAIN}/${service}`;
}

const BY_SPIFFE_ID = new Map<string, ServiceName>(SERVICE_NAMES.map((name) => [spiffeId(name), name]));

/**
 * The service a verified peer certificate names, from its `spiffe://marketplace/<service>` URI
 * SAN; undefined when it names none or more than one (a certificate is one identity). The CN is
 * not read: cert-manager and hand-made certificates may set it freely, a URI SAN is deliberate.
 */
export function callerIdentity(cert: PeerCertificate | undefined): ServiceName | undefined {
  // Node renders SANs as "DNS:billing, URI:spiffe://marketplace/billing, IP Address:127.0.0.1".
  const names = (cert?.subjectaltname ?? "")
    .split(", ")
    .filter((entry) => entry.startsWith("URI:"))
    .map((entry) => BY_SPIFFE_ID.get(entry.slice("URI:".length)))
    .filter((name) => name !== undefined);
  return names.length === 1 ? names[0] : undefined;
}
