// @peculiar/x509 resolves its algorithms through tsyringe, which needs the Reflect metadata API.
import "reflect-metadata";
import { webcrypto } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import * as x509 from "@peculiar/x509";
import { SERVICE_NAMES, spiffeId, type ServiceName } from "./service-identity.ts";

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

/** ECDSA P-256: key generation takes a millisecond (tests make a CA per process) and every TLS stack accepts it. */
const KEY_ALGORITHM = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
const DAY_MS = 86_400_000;

/** A certificate and its private key, PEM-encoded (PKCS#8 for the key). */
export interface PemPair {
  cert: string;
  key: string;
}

/** A CA able to issue: its PEM pair and the key to sign with. */
export interface CertificateAuthority extends PemPair {
  signingKey: CryptoKey;
  certificate: x509.X509Certificate;
}

/**
 * The DNS names a service's certificate carries: its Kubernetes Service in every form a client
 * may dial (the Services are headless: the name resolves to the pods, and a client checks the
 * certificate against the name it dialled, not a pod's address), the compose service of the same
 * name, and `localhost` for `npm start` and tests.
 */
export function serviceDnsNames(service: ServiceName, namespace = "marketplace"): string[] {
  return [
    service,
    `${service}.${namespace}`,
    `${service}.${namespace}.svc`,
    `${service}.${namespace}.svc.cluster.local`,
    "localhost",
  ];
}

async function keyPair(): Promise<CryptoKeyPair> {
  return (await webcrypto.subtle.generateKey(KEY_ALGORITHM, true, ["sign", "verify"])) as CryptoKeyPair;
}

async function privateKeyPem(key: CryptoKey): Promise<string> {
  return x509.PemConverter.encode(await webcrypto.subtle.exportKey("pkcs8", key), "PRIVATE KEY");
}

/** A new self-signed CA that may sign only end-entity certificates (path length 0). */
export async function createCertificateAuthority(name = "marketplace services CA", validDays = 3650) {
  const keys = await keyPair();
  const certificate = await x509.X509CertificateGenerator.createSelfSigned({
    name: `CN=${name}`,
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + validDays * DAY_MS),
    signingAlgorithm: KEY_ALGORITHM,
    keys,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return {
    cert: certificate.toString("pem"),
    key: await privateKeyPem(keys.privateKey),
    signingKey: keys.privateKey,
    certificate,
  } satisfies CertificateAuthority;
}

/** Loads a CA written by `createCertificateAuthority` (its PEM certificate and PKCS#8 key). */
export async function loadCertificateAuthority(pems: PemPair): Promise<CertificateAuthority> {
  const signingKey = await webcrypto.subtle.importKey(
    "pkcs8",
    x509.PemConverter.decodeFirst(pems.key),
    KEY_ALGORITHM,
    true,
    ["sign"],
  );
  return { ...pems, signingKey, certificate: new x509.X509Certificate(pems.cert) };
}

/**
 * A service's certificate: CN and URI SAN `spiffe://marketplace/<service>` (the identity the
 * caller tables check), DNS SANs from `serviceDnsNames` plus `dnsNames`, IP SAN 127.0.0.1 and
 * ::1, usable as server and as client.
 */
export async function issueServiceCertificate(
  ca: CertificateAuthority,
  service: ServiceName,
  { validDays = 365, dnsNames = [] as string[] } = {},
): Promise<PemPair> {
  const keys = await keyPair();
  const names = [...new Set([...serviceDnsNames(service), ...dnsNames])];
  const certificate = await x509.X509CertificateGenerator.create({
    subject: `CN=${service}`,
    issuer: ca.certificate.subject,
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + validDays * DAY_MS),
    signingAlgorithm: KEY_ALGORITHM,
    publicKey: keys.publicKey,
    signingKey: ca.signingKey,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]),
      new x509.SubjectAlternativeNameExtension([
        { type: "url", value: spiffeId(service) },
        ...names.map((value) => ({ type: "dns" as const, value })),
        { type: "ip", value: "127.0.0.1" },
        { type: "ip", value: "::1" },
      ]),
      await x509.AuthorityKeyIdentifierExtension.create(ca.certificate),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { cert: certificate.toString("pem"), key: await privateKeyPem(keys.privateKey) };
}

/** Where a service's files are under a certificates directory: the layout of a kubernetes.io/tls Secret. */
export function serviceTlsFiles(dir: string, service: ServiceName) {
  const own = join(dir, service);
  return { ca: join(own, "ca.crt"), cert: join(own, "tls.crt"), key: join(own, "tls.key") };
}

/** The TLS_* variables that point a service at its files under `dir`. */
export function serviceTlsEnv(dir: string, service: ServiceName): Record<string, string> {
  const files = serviceTlsFiles(dir, service);
  return { TLS_MODE: "mtls", TLS_CA_FILE: files.ca, TLS_CERT_FILE: files.cert, TLS_KEY_FILE: files.key };
}

/** A service certificate is reissued when it expires within this long (npm start runs for days at most). */
const RENEW_BEFORE_MS = 30 * DAY_MS;

/**
 * Makes `dir` hold a CA (`ca.crt`, `ca.key`) and, for every service, `<service>/{ca.crt,tls.crt,
 * tls.key}` signed by it. What exists and is valid for another 30 days is kept, so the CA is
 * created once and restarts reuse it; a missing or expiring service certificate is reissued.
 * Keys are written readable by their owner only.
 */
export async function ensureServiceCertificates(dir: string): Promise<void> {
  // Only `dir` itself is private: parents made here keep the usual mode (npm start's .data also
  // holds the embedded PostgreSQL's files, which its own user must reach).
  mkdirSync(dirname(dir), { recursive: true });
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const caFiles = { cert: join(dir, "ca.crt"), key: join(dir, "ca.key") };
  let ca: CertificateAuthority;
  if (existsSync(caFiles.cert) && existsSync(caFiles.key)) {
    ca = await loadCertificateAuthority({
      cert: readFileSync(caFiles.cert, "utf8"),
      key: readFileSync(caFiles.key, "utf8"),
    });
  } else {
    ca = await createCertificateAuthority();
    writeFileSync(caFiles.key, ca.key, { mode: 0o600 });
    writeFileSync(caFiles.cert, ca.cert);
  }
  for (const service of SERVICE_NAMES) {
    const files = serviceTlsFiles(dir, service);
    if (existsSync(files.key) && stillValid(files.cert, ca)) continue;
    const issued = await issueServiceCertificate(ca, service);
    mkdirSync(join(dir, service), { recursive: true, mode: 0o700 });
    writeFileSync(files.key, issued.key, { mode: 0o600 });
    writeFileSync(files.cert, issued.cert);
    writeFileSync(files.ca, ca.cert);
  }
}

/** The certificate at `path` exists, was issued by `ca` and stays valid for RENEW_BEFORE_MS. */
function stillValid(path: string, ca: CertificateAuthority): boolean {
  if (!existsSync(path)) return false;
  const cert = new x509.X509Certificate(readFileSync(path, "utf8"));
  return cert.issuer === ca.certificate.subject && cert.notAfter.getTime() - Date.now() > RENEW_BEFORE_MS;
}
