import { isIPv4, isIPv6 } from "node:net";

/** The 16-bit groups of an IPv6 address (zone stripped, embedded IPv4 and `::` expanded). */
function ipv6Groups(address: string): number[] {
  const [head, tail] = address.split("%")[0]!.split("::") as [string, string | undefined];
  const groupsOf = (part: string | undefined): number[] =>
    !part
      ? []
      : part.split(":").flatMap((piece) => {
          if (!piece.includes(".")) return [parseInt(piece, 16)];
          const [a, b, c, d] = piece.split(".").map(Number) as [number, number, number, number];
          return [(a << 8) | b, (c << 8) | d];
        });
  const left = groupsOf(head);
  const right = groupsOf(tail);
  const zeros = tail === undefined ? [] : new Array<number>(8 - left.length - right.length).fill(0);
  return [...left, ...zeros, ...right];
}

/**
 * The key a client IP's per-IP limits count under (sign-up, failed logins and invite codes).
 * One host is given a whole IPv6 /64 (SLAAC, privacy addresses: it can pick any of 2^64), so an
 * IPv6 address counts as its /64, written `2001:db8:0:1::/64`. IPv4 addresses, and IPv4-mapped
 * IPv6 ones (`::ffff:192.0.2.1`, how a dual-stack socket reports an IPv4 client), stay one
 * address each. Anything that is not an IP address is its own key, unchanged.
 */
export function clientIpKey(clientIp: string): string {
  const ip = clientIp.trim();
  if (isIPv4(ip)) return ip;
  if (!isIPv6(ip)) return ip;
  const groups = ipv6Groups(ip.toLowerCase());
  const mapped = groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff;
  if (mapped) return [groups[6]! >> 8, groups[6]! & 0xff, groups[7]! >> 8, groups[7]! & 0xff].join(".");
  return `${groups
    .slice(0, 4)
    .map((g) => g.toString(16))
    .join(":")}::/64`;
}
