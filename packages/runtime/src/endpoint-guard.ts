import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from "node:dns";
import { isIP } from "node:net";
import ipaddr from "ipaddr.js";
import { AppError } from "./errors.ts";

/**
 * SSRF rules for hoster endpoints (docs/adr/0032-hoster-registration-and-endpoint-guard.md). A
 * hoster chooses the URL the registry calls, so it must not point the registry at itself, the
 * cluster's private network or a cloud metadata service. Only global unicast addresses pass:
 * loopback, RFC 1918 / fc00::/7, link-local (169.254.169.254 and fd00:ec2::254, the metadata
 * services, fall in those), CGNAT 100.64/10, unspecified, multicast, broadcast, documentation and
 * other reserved ranges are refused. `ALLOW_PRIVATE_UPSTREAMS=true` lifts the address rule for
 * tests and local demos.
 */

const MAX_URL_CHARS = 2048;

/** True when `address` (an IP literal) may not be called. IPv4-mapped IPv6 is judged as IPv4. */
export function isForbiddenAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return true;
  let parsed = ipaddr.parse(address);
  if (parsed.kind() === "ipv6" && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) {
    parsed = (parsed as ipaddr.IPv6).toIPv4Address();
  }
  return parsed.range() !== "unicast";
}

const invalidEndpoint = (message: string) => new AppError("invalid_request", message, { param: "endpoint_url" });

/**
 * Parses and normalises a hoster's endpoint URL: http or https, no credentials, no query or
 * fragment; a trailing slash of its path is dropped (paths such as `/v1/models` are appended).
 */
export function parseEndpointUrl(raw: string): URL {
  const text = raw.trim();
  if (text === "" || text.length > MAX_URL_CHARS) {
    throw invalidEndpoint(`endpoint_url must be an http(s) URL of at most ${MAX_URL_CHARS} characters.`);
  }
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw invalidEndpoint("endpoint_url must be an http(s) URL.");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw invalidEndpoint("endpoint_url must use http or https.");
  if (url.username !== "" || url.password !== "") {
    throw invalidEndpoint("endpoint_url must not contain credentials; the token goes in api_key.");
  }
  if (url.search !== "" || url.hash !== "") throw invalidEndpoint("endpoint_url must not have a query or fragment.");
  url.pathname = url.pathname.replace(/\/+$/, "");
  return url;
}

/** The URL's host as an address or a name (IPv6 literals lose their brackets). */
const bareHost = (hostname: string) => hostname.replace(/^\[(.*)\]$/, "$1");

/** Every address `host` resolves to, in the order the resolver gives them. */
function resolveAll(host: string): Promise<LookupAddress[]> {
  return new Promise((resolve, reject) =>
    dnsLookup(host, { all: true, verbatim: true }, (err, addresses) => (err ? reject(err) : resolve(addresses))),
  );
}

/**
 * Refuses an endpoint whose host is, or resolves to, a forbidden address (all addresses are
 * checked: one private answer is enough to refuse). The message names no resolved address, so
 * the check cannot be used to map internal DNS.
 */
export async function assertPublicEndpoint(url: URL, allowPrivate: boolean): Promise<void> {
  if (allowPrivate) return;
  const host = bareHost(url.hostname);
  let addresses: string[];
  if (isIP(host)) {
    addresses = [host];
  } else {
    try {
      addresses = (await resolveAll(host)).map((a) => a.address);
    } catch {
      throw invalidEndpoint("endpoint_url's host name could not be resolved.");
    }
  }
  if (addresses.length === 0 || addresses.some(isForbiddenAddress)) {
    throw invalidEndpoint(
      "endpoint_url must be a public address: it is or resolves to a loopback, private, link-local, " +
        "shared or metadata address.",
    );
  }
}

/** The connect-time refusal; undici surfaces it as the request's error. */
export class ForbiddenAddressError extends Error {
  override name = "ForbiddenAddressError";
  readonly code = "ERR_FORBIDDEN_UPSTREAM_ADDRESS";
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for net/tls.connect that resolves and then refuses forbidden addresses, so the
 * address checked is the address connected to: a name that resolved to a public address at
 * registration and to 127.0.0.1 now (DNS rebinding) is refused here.
 */
export function guardedLookup(hostname: string, options: LookupOptions, callback: LookupCallback): void {
  dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return callback(err, []);
    if (addresses.length === 0 || addresses.some((a) => isForbiddenAddress(a.address))) {
      return callback(new ForbiddenAddressError("upstream resolves to a forbidden address"), []);
    }
    if (options.all) return callback(null, addresses);
    const [first] = addresses as [LookupAddress];
    callback(null, first.address, first.family);
  });
}

/**
 * Checks a host given as an IP literal, which net.connect dials without calling `lookup`.
 * Returns the error to fail the connection with, or undefined.
 */
export function literalAddressRefusal(hostname: string): ForbiddenAddressError | undefined {
  const host = bareHost(hostname);
  return isIP(host) && isForbiddenAddress(host)
    ? new ForbiddenAddressError("upstream is a forbidden address")
    : undefined;
}
