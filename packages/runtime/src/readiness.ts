import type { NatsConnection } from "@nats-io/transport-node";
import type { Orm } from "./db.ts";
import type { ReadinessCheck } from "./metrics-server.ts";

/** How long each dependency gets to answer a readiness check (the kubelet's probe times out at 1 s by default). */
const CHECK_TIMEOUT_MS = 800;

function within<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${what} did not answer within ${CHECK_TIMEOUT_MS} ms`)),
      CHECK_TIMEOUT_MS,
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * A backend service's readiness, honestly: not shutting down, PostgreSQL answers `select 1` and
 * NATS answers a round trip, each within CHECK_TIMEOUT_MS. A dependency outage makes the pod
 * unready (its address leaves the headless Service's DNS answer) until it is back.
 */
export function dependencyReadiness(orm: Orm, nc: NatsConnection, closing: () => boolean): ReadinessCheck {
  return async () => {
    if (closing()) throw new Error("shutting down");
    if (nc.isClosed()) throw new Error("NATS connection closed");
    const [db, nats] = await Promise.allSettled([
      within(orm.checkConnection(), "PostgreSQL"),
      within(nc.flush(), "NATS"),
    ]);
    const problems: string[] = [];
    if (db.status === "rejected") problems.push((db.reason as Error).message);
    else if (!db.value.ok) problems.push("PostgreSQL unreachable");
    if (nats.status === "rejected") problems.push((nats.reason as Error).message);
    if (problems.length > 0) throw new Error(problems.join("; "));
  };
}
