import pg from "pg";
import { HosterModel } from "@mkt/proto/registry/v1/registry";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startHarness, waitFor, type Harness } from "./registry-harness.ts";
import { startRealHoster } from "./hoster-servers.ts";

const MODEL = "llama-3-8b.Q4_K_M.gguf";

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ HOSTER_PROBE_INTERVAL_MS: "100", HOSTER_UNHEALTHY_AFTER: "2" });
});
afterAll(() => h.close());

it("probes flip a hoster unhealthy when its server stops and healthy when it comes back, billing nothing", async () => {
  let server = await startRealHoster({ models: [MODEL] });
  const { token, port } = server;
  const { hoster } = await h.client.registerHoster({
    name: "Flaky GPUs",
    email: "flaky@example.com",
    endpointUrl: server.url,
    apiKey: token,
    inviteCode: h.accounts.invite(),
    password: "a long enough password",
    clientIp: "203.0.113.9",
    models: [HosterModel.fromPartial({ modelId: MODEL, contextWindow: 8192n })],
  });
  const hosterId = hoster!.hosterId;
  const status = async () => (await h.client.getHoster({ hosterId })).hoster!;

  // Probes keep a live server healthy and move its check time forward.
  const checked = await waitFor(status, (x) => x.lastCheckedAt > hoster!.lastCheckedAt);
  expect(checked.status).toBe("healthy");

  await server.close();
  const down = await waitFor(status, (x) => x.status === "unhealthy");
  expect(down.status).toBe("unhealthy");
  expect(down.consecutiveFailures).toBeGreaterThanOrEqual(2);
  expect((await h.client.listHosters({})).hosters.find((x) => x.hosterId === hosterId)?.status).toBe("unhealthy");

  const db = new pg.Client({ connectionString: h.databaseUrl });
  await db.connect();
  try {
    const [row] = (await db.query("select last_error from registry.hosters where id = $1", [hosterId])).rows;
    expect(row.last_error).toMatch(/^Could not reach your server for GET \/health/);
    expect(row.last_error).not.toContain(token);
  } finally {
    await db.end();
  }

  server = await startRealHoster({ models: [MODEL], token, port });
  try {
    const up = await waitFor(status, (x) => x.status === "healthy");
    expect(up.status).toBe("healthy");
    expect(up.consecutiveFailures).toBe(0);
  } finally {
    await server.close();
  }

  // Each transition was announced once (registered, unhealthy, healthy), not every probe.
  await waitFor(
    () => h.catalogChanges.filter((id) => id === hosterId).length,
    (n) => n >= 3,
  );
  expect(h.catalogChanges.filter((id) => id === hosterId)).toHaveLength(3);

  // Probes are not chat calls: no usage event.
  expect(h.published).toEqual([]);
  expect(h.logLines.join("\n")).not.toContain(token);
});

it("a probe round with a wrong stored token marks the hoster failing, with the token out of every message", async () => {
  const server = await startRealHoster({ models: [MODEL] });
  try {
    const { hoster } = await h.client.registerHoster({
      name: "Rotating GPUs",
      email: "rotating@example.com",
      endpointUrl: server.url,
      apiKey: server.token,
      inviteCode: h.accounts.invite(),
      password: "",
      clientIp: "203.0.113.9",
      models: [HosterModel.fromPartial({ modelId: MODEL, contextWindow: 8192n })],
    });
    await server.close();
    const other = await startRealHoster({ models: [MODEL], port: server.port });
    try {
      // The server now wants another token: /v1/models answers 401 to the stored one.
      const down = await waitFor(
        async () => (await h.client.getHoster({ hosterId: hoster!.hosterId })).hoster!,
        (x) => x.status === "unhealthy",
      );
      expect(down.status).toBe("unhealthy");
    } finally {
      await other.close();
    }
  } finally {
    await server.close().catch(() => undefined);
  }
});
