/**
 * `npm run certs -- <dir>` (or, in the image, `node scripts/service-certs.ts <dir>`): makes the
 * services' CA and one certificate per service in `<dir>` unless they are there already, as
 * `npm start` does in .data/tls. The layout is that of kubernetes.io/tls Secrets:
 *
 *   <dir>/ca.crt, <dir>/ca.key              the CA (keep ca.key offline once the certificates exist)
 *   <dir>/<service>/{ca.crt,tls.crt,tls.key} for edge, accounts, billing and registry
 *
 * docker-compose.yml runs it once into a volume; docs/deploy.md shows how to load the files into
 * Kubernetes Secrets by hand when cert-manager is not used.
 */
import { resolve } from "node:path";
import { ensureServiceCertificates } from "@mkt/runtime/service-certificates";
import { SERVICE_NAMES } from "@mkt/runtime/service-identity";

const dir = process.argv[2];
if (!dir) {
  console.error("usage: npm run certs -- <directory>");
  process.exit(2);
}
await ensureServiceCertificates(resolve(dir));
console.log(`CA and certificates for ${SERVICE_NAMES.join(", ")} are in ${resolve(dir)}`);
