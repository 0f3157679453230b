import pg from "pg";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";

const START_HINT =
  "Start it from your distribution's packages (Debian: `pg_ctlcluster 15 main start`; " +
  "`nats-server -js`), or with Docker as docs/deploy.md shows (Only PostgreSQL and NATS).";

/** Fails with a message naming PostgreSQL when it cannot be reached. */
export async function checkPostgres(url: string): Promise<void> {
  const admin = new URL(url);
  admin.pathname = "/postgres";
  const client = new pg.Client({ connectionString: admin.toString(), connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query("SELECT 1");
  } catch (err) {
    throw new Error(`PostgreSQL is not reachable at ${admin.host} (${(err as Error).message}). ${START_HINT}`, {
      cause: err,
    });
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Fails with a message naming NATS when it cannot be reached or has JetStream off. */
export async function checkNats(url: string): Promise<void> {
  let nc;
  try {
    nc = await connect({ servers: url.split(","), timeout: 3000, maxReconnectAttempts: 0 });
  } catch (err) {
    throw new Error(`NATS is not reachable at ${hosts(url)} (${(err as Error).message}). ${START_HINT}`, {
      cause: err,
    });
  }
  try {
    await (await jetstreamManager(nc)).getAccountInfo();
  } catch (err) {
    throw new Error(`NATS at ${hosts(url)} answers but JetStream is off: start nats-server with -js.`, { cause: err });
  } finally {
    await nc.close();
  }
}

/** The servers of a NATS URL list without credentials, which must not reach a message. */
function hosts(url: string): string {
  return url
    .split(",")
    .map((server) => server.replace(/\/\/[^@/]*@/, "//"))
    .join(",");
}
