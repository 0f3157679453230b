import { mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { freePort } from "@mkt/testkit/ports";
import { answers } from "@mkt/testkit/local-servers";
import { NATS_HINT, natsFor, postgresFor } from "../../scripts/lib/local-infra.ts";

// Which PostgreSQL and NATS `npm start` uses. The embedded path itself runs in
// npm-start-offline.test.ts; here, the choices that a machine with both running can show.

const dataDir = mkdtempSync(join(tmpdir(), "local-infra-"));

it("takes a configured URL, even when nothing answers there", async () => {
  const db = await postgresFor({ DATABASE_URL: "postgres://u:p@127.0.0.1:1/x" }, dataDir);
  expect(db).toEqual({ url: "postgres://u:p@127.0.0.1:1/x", origin: "from DATABASE_URL" });
  const nats = await natsFor({ NATS_URL: "nats://127.0.0.1:1" }, dataDir);
  expect(nats).toEqual({ url: "nats://127.0.0.1:1", origin: "from NATS_URL" });
});

it("runs its own nats-server with JetStream where nothing answers, and says in one line how to get one", async () => {
  const port = await freePort();
  const address = { host: "127.0.0.1", port };
  const own = await natsFor({ PATH: "/usr/sbin:/usr/local/sbin:/usr/bin" }, dataDir, { address });
  expect(own.spec).toMatchObject({
    name: "nats",
    args: ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", join(dataDir, "nats")],
  });
  await expect(natsFor({ PATH: "/nonexistent" }, dataDir, { address, sbin: [] })).rejects.toThrow(NATS_HINT);
  expect(NATS_HINT).not.toContain("\n");
  expect(NATS_HINT).toContain("docker compose --profile dev up -d nats-dev");
});

it("uses what answers at the default address without starting anything", async () => {
  const server = createServer().listen(0, "127.0.0.1");
  await new Promise((r) => server.once("listening", r));
  const port = (server.address() as { port: number }).port;
  expect(await answers("127.0.0.1", port)).toBe(true);
  const nats = await natsFor({}, dataDir, { address: { host: "127.0.0.1", port } });
  expect(nats.spec).toBeUndefined();
  expect(nats.url).toBe(`nats://127.0.0.1:${port}`);
  server.close();
});
