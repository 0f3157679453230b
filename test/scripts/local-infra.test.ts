import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { freePort } from "@mkt/testkit/ports";
import { answers, natsServerSyncsEveryWrite, natsServerVersion } from "@mkt/testkit/local-servers";
import { renderNatsJetStreamBlock } from "@mkt/runtime/nats-server-config";
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
  const configPath = join(dataDir, "nats-server.conf");
  expect(own.spec).toMatchObject({ name: "nats", args: ["-c", configPath, "-a", "127.0.0.1", "-p", String(port)] });
  // Its JetStream block: the store, and every write synced before the ack where the server can.
  const syncs = natsServerSyncsEveryWrite(own.spec!.command!);
  expect(readFileSync(configPath, "utf8")).toBe(
    renderNatsJetStreamBlock({ storeDir: join(dataDir, "nats"), syncEveryWrite: syncs }),
  );
  expect(own.origin).toContain(syncs ? "every write synced to disk" : "cannot sync every write: 2.10+ can");
  await expect(natsFor({ PATH: "/nonexistent" }, dataDir, { address, sbin: [] })).rejects.toThrow(NATS_HINT);
  expect(NATS_HINT).not.toContain("\n");
  expect(NATS_HINT).toContain("docker compose --profile dev up -d nats-dev");
});

it("syncs every write only with a nats-server that knows the setting (2.10 and later)", () => {
  const fake = (version: string) => {
    const path = join(dataDir, `nats-server-${version}`);
    writeFileSync(path, `#!/bin/sh\necho "nats-server: v${version}"\n`, { mode: 0o755 });
    return path;
  };
  expect(natsServerVersion(fake("2.9.10"))).toBe("2.9.10");
  expect(natsServerSyncsEveryWrite(fake("2.9.10"))).toBe(false);
  expect(natsServerSyncsEveryWrite(fake("2.10.0"))).toBe(true);
  expect(natsServerSyncsEveryWrite(fake("2.11.4"))).toBe(true);
  expect(natsServerSyncsEveryWrite(fake("3.0.1"))).toBe(true);
  expect(natsServerSyncsEveryWrite(join(dataDir, "no-such-binary"))).toBe(false);
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
