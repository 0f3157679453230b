import { readFileSync } from "node:fs";
import { createServer } from "node:net";

/**
 * The ports the kernel hands out for outgoing connections (and for listening on port 0). A port
 * reserved here and listened on later must come from outside them: otherwise any connection made
 * in between (another test file's, to PostgreSQL say) may be given it, and the listen fails with
 * EADDRINUSE.
 */
function ephemeralRange(): [number, number] {
  try {
    const [low, high] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
    if (low && high) return [low, high];
  } catch {
    // Not Linux: the IANA range most systems use.
  }
  return [49152, 65535];
}

/** Ports reserved by this process so far: two calls never return the same one. */
const reserved = new Set<number>();

function listensOn(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/**
 * A TCP port free on loopback right now, for a server the caller starts later (or restarts on the
 * same port). It lies below the kernel's ephemeral range, from 20000 up, so only another test's
 * reservation could take it before the caller listens; tries random ports until one is free.
 */
export async function freePort(): Promise<number> {
  const [ephemeralLow] = ephemeralRange();
  const low = 20_000;
  const high = Math.max(low + 1_000, ephemeralLow);
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low));
    if (reserved.has(port)) continue;
    if (await listensOn(port)) {
      reserved.add(port);
      return port;
    }
  }
  throw new Error(`no free port found between ${low} and ${high}`);
}
