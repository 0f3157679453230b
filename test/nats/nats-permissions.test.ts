import { randomBytes, randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { newRequestId } from "@mkt/runtime/ids";
import { createLogger } from "@mkt/runtime/logger";
import { connectNats, eventNames, userInbox, type NatsConnection } from "@mkt/runtime/nats";
import { NATS_USERS, type NatsUser } from "@mkt/runtime/nats-permissions";
import { natsPasswordVariable, renderNatsServerConfig } from "@mkt/runtime/nats-server-config";
import { freshEventsPrefix } from "@mkt/testkit/env";
import { startPrivateNatsServer, type PrivateNatsServer } from "@mkt/testkit/nats-server";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { LeaseRecall, LeaseRecallAck } from "@mkt/proto/billing/v1/leases";
import { CatalogChanged, KeyRevoked, KeyRevokedAck, UsageCompleted } from "@mkt/proto/events/v1/events";
import { startTestBilling, type TestBilling } from "../../services/billing/test/billing-harness.ts";
import { startHosterUsageConsumer } from "../../services/registry/src/hosters/hoster-usage-consumer.ts";
import { createRegistryMetrics } from "../../services/registry/src/metrics/registry-metrics.ts";
import { createRelayMetrics } from "../../edge/src/relay/relay-metrics.ts";
import { UsagePublisher } from "../../edge/src/relay/usage-publisher.ts";
import { LeaseTable } from "../../edge/src/leases/lease-table.ts";
import { followLeaseRecalls } from "../../edge/src/leases/lease-recall.ts";
import { followKeyRevocations } from "../../edge/src/key-revocations.ts";
import { PrincipalCache } from "../../edge/src/principal-cache.ts";
import { Registry } from "prom-client";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";

// The NATS users on a nats-server of this file's own, started with the very
// configuration the deployments mount (renderNatsServerConfig): each service's real traffic goes
// through, and a forged usage.completed, keys.revoked or lease recall is refused by the server.

const log = createLogger("nats-permissions-test", "silent");
const prefix = freshEventsPrefix();
const names = eventNames(prefix);
const passwords = Object.fromEntries(NATS_USERS.map((user) => [user, `n${randomBytes(16).toString("hex")}`])) as Record<
  NatsUser,
  string
>;

let nats: PrivateNatsServer;
let billing: TestBilling;
const as = {} as Record<NatsUser, NatsConnection>;

beforeAll(async () => {
  nats = await startPrivateNatsServer({
    config: renderNatsServerConfig(prefix),
    env: Object.fromEntries(NATS_USERS.map((user) => [natsPasswordVariable(user), passwords[user]])),
  });
  for (const user of NATS_USERS) {
    as[user] = await connectNats(nats.url, `${user}-test`, log, { user, password: passwords[user] });
  }
  // The real billing, connected as `billing`: it creates the usage stream and its durable consumer.
  billing = await startTestBilling({
    NATS_URL: nats.url,
    NATS_USER: "billing",
    NATS_PASSWORD: passwords.billing,
    EVENTS_PREFIX: prefix,
    LEASE_TTL_MS: "1000",
    STARTING_CREDIT_USD: "1",
  });
});

afterAll(async () => {
  for (const nc of Object.values(as)) await nc.close();
  await billing?.close();
  await nats?.close();
});

/** The next permission violation the server reports to this connection. */
function nextViolation(nc: NatsConnection): Promise<{ operation: string; subject: string }> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no permission violation reported")), 3_000);
    void (async () => {
      for await (const status of nc.status()) {
        if (status.type === "error" && status.error.name === "PermissionViolationError") {
          clearTimeout(timer);
          resolve(status.error as unknown as { operation: string; subject: string });
          return;
        }
      }
    })();
  });
}

/** Publishes as `nc` and returns the server's refusal. */
async function refusedPublish(nc: NatsConnection, subject: string, data = new Uint8Array()) {
  const violation = nextViolation(nc);
  nc.publish(subject, data);
  await nc.flush();
  return violation;
}

/** How a request (a JetStream publish too) to a subject the user may not publish to fails. */
const refusedRequest = (subject: string) => ({
  message: expect.stringContaining(`Permissions Violation for Publish to "${subject}"`),
});

/** Messages a subscription receives within `ms`. */
async function received(nc: NatsConnection, subject: string, act: () => Promise<void>, ms = 300) {
  const got: Uint8Array[] = [];
  const sub = nc.subscribe(subject, { callback: (_err, msg) => void got.push(msg.data) });
  await nc.flush();
  await act();
  await new Promise((resolve) => setTimeout(resolve, ms));
  sub.unsubscribe();
  return got;
}

async function usageRecord(requestId: string) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const [row] = await billing.query(`select account_id, cost_micros from usage_records where request_id = $1`, [
      requestId,
    ]);
    if (row || Date.now() > deadline) return row;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const usageEvent = (accountId: string) =>
  UsageCompleted.encode(
    UsageCompleted.fromPartial({
      requestId: newRequestId(),
      accountId,
      modelId: "demo-small",
      provider: "local",
      inputTokens: 10n,
      outputTokens: 10n,
      success: true,
    }),
  ).finish();

describe("NATS users", () => {
  it("refuses a client without a password or with another user's", async () => {
    await expect(connect({ servers: nats.url, reconnect: false })).rejects.toMatchObject({
      name: "AuthorizationError",
    });
    await expect(
      connect({ servers: nats.url, user: "registry", pass: passwords.edge, reconnect: false }),
    ).rejects.toMatchObject({ name: "AuthorizationError" });
  });

  it("the edge publishes usage.completed with JetStream's ack, and billing's consumer settles it", async () => {
    // What the edge's relay does for every answer (edge/src/relay/usage-publisher.ts).
    const publisher = new UsagePublisher({
      nc: as.edge,
      subject: names.usageCompleted,
      edgeId: "edge-permissions-test",
      ackTimeoutMs: 2_000,
      durableTimeoutMs: 5_000,
      metrics: createRelayMetrics(new Registry()),
      log,
    });
    const accountId = randomUUID();
    const event = UsageCompleted.decode(usageEvent(accountId));
    await publisher.publish(event);
    expect(publisher.pending).toBe(0);
    expect(await usageRecord(event.requestId)).toMatchObject({ account_id: accountId });
    // ... and acks it: nothing is left pending or waiting for an ack (a refused ack would be redelivered).
    const jsm = await jetstreamManager(as.billing);
    const deadline = Date.now() + 5_000;
    let info = await jsm.consumers.info(names.usageStream, names.settlerConsumer);
    while ((info.num_pending > 0 || info.num_ack_pending > 0) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      info = await jsm.consumers.info(names.usageStream, names.settlerConsumer);
    }
    expect({ pending: info.num_pending, unacked: info.num_ack_pending, redelivered: info.num_redelivered }).toEqual({
      pending: 0,
      unacked: 0,
      redelivered: 0,
    });
    await publisher.close();
  });

  it("refuses usage.completed from every other service, and the stream never holds it", async () => {
    const jsm = await jetstreamManager(as.billing);
    const before = (await jsm.streams.info(names.usageStream)).state.messages;
    for (const user of ["registry", "accounts", "billing"] as const) {
      const event = usageEvent(randomUUID());
      await expect(jetstream(as[user]).publish(names.usageCompleted, event, { timeout: 2_000 })).rejects.toMatchObject(
        refusedRequest(names.usageCompleted),
      );
      expect(await refusedPublish(as[user], names.usageCompleted, event)).toMatchObject({
        operation: "publish",
        subject: names.usageCompleted,
      });
    }
    expect((await jsm.streams.info(names.usageStream)).state.messages).toBe(before);
  });

  it("registry reads usage.completed with a durable consumer of its own (hosters' figures)", async () => {
    const written: Array<ReadonlyMap<string, number>> = [];
    const consumer = await startHosterUsageConsumer(
      as.registry,
      names,
      {
        store: { addUsageMismatches: async (counts) => void written.push(counts) },
        minutes: { add: async () => undefined, prune: async () => undefined },
        transaction: (work) => work(),
        deadLetters: async () => undefined,
        clock: () => new Date(),
      },
      createRegistryMetrics().usageMismatches,
      log,
    );
    await consumer.ready;
    const hosterId = randomUUID();
    const event = UsageCompleted.fromPartial({
      requestId: newRequestId(),
      accountId: randomUUID(),
      provider: "hoster",
      hosterId,
      usageMismatch: "output",
    });
    await jetstream(as.edge).publish(names.usageCompleted, UsageCompleted.encode(event).finish(), {
      msgID: event.requestId,
    });
    const deadline = Date.now() + 10_000;
    while (!written.some((counts) => counts.get(hosterId) === 1) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await consumer.stop();
    expect(written.some((counts) => counts.get(hosterId) === 1)).toBe(true);
    const jsm = await jetstreamManager(as.registry);
    const info = await jsm.consumers.info(names.usageStream, names.hosterStatsConsumer);
    expect({ pending: info.num_pending, unacked: info.num_ack_pending }).toEqual({ pending: 0, unacked: 0 });
  });

  it("lets only billing create or update the usage stream; registry may only look it up", async () => {
    const config = JSON.stringify({ name: names.usageStream, subjects: [names.usageCompleted], num_replicas: 1 });
    for (const verb of ["CREATE", "UPDATE"]) {
      const subject = `$JS.API.STREAM.${verb}.${names.usageStream}`;
      for (const user of ["registry", "edge", "accounts"] as const) {
        await expect(
          as[user].request(subject, new TextEncoder().encode(config), { timeout: 2_000 }),
        ).rejects.toMatchObject(refusedRequest(subject));
      }
    }
    const info = await (await jetstreamManager(as.registry)).streams.info(names.usageStream);
    expect(info.config.name).toBe(names.usageStream);
  });

  it("lets only billing read its settlement consumer: others can neither pull from it nor subscribe to usage", async () => {
    for (const user of ["edge", "accounts", "registry"] as const) {
      const next = `$JS.API.CONSUMER.MSG.NEXT.${names.usageStream}.${names.settlerConsumer}`;
      await expect(as[user].request(next, new Uint8Array(), { timeout: 2_000 })).rejects.toMatchObject(
        refusedRequest(next),
      );
      const violation = nextViolation(as[user]);
      as[user].subscribe(names.usageCompleted);
      expect(await violation).toMatchObject({ operation: "subscription", subject: names.usageCompleted });
    }
  });

  it("accounts' keys.revoked reaches the edges; the same from anyone else is refused and never delivered", async () => {
    const revoked = KeyRevoked.encode({ keyId: randomUUID(), accountId: randomUUID() }).finish();
    const genuine = await received(as.edge, names.keysRevoked, async () => {
      as.accounts.publish(names.keysRevoked, revoked);
      await as.accounts.flush();
    });
    expect(genuine).toHaveLength(1);
    for (const user of ["edge", "billing", "registry"] as const) {
      const forged = await received(as.edge, names.keysRevoked, async () => {
        expect(await refusedPublish(as[user], names.keysRevoked, revoked)).toMatchObject({
          subject: names.keysRevoked,
        });
      });
      expect(forged, `keys.revoked from ${user}`).toEqual([]);
    }
  });

  it("an edge acks accounts' keys.revoked on accounts' inbox (how a revocation knows it may answer)", async () => {
    const cache = new PrincipalCache({ ttlMs: 2_000, edgeId: "edge_permitted" });
    const stop = followKeyRevocations(as.edge, names.keysRevoked, cache, log);
    await as.edge.flush();
    try {
      // Exactly what accounts sends (services/accounts/src/keys/revoke-api-key.ts).
      const inbox = userInbox("accounts");
      const acks = await received(as.accounts, inbox, async () => {
        const revoked = KeyRevoked.encode({ keyId: randomUUID(), accountId: randomUUID() }).finish();
        as.accounts.publish(names.keysRevoked, revoked, { reply: inbox });
        await as.accounts.flush();
      });
      expect(acks.map((data) => KeyRevokedAck.decode(data))).toEqual([{ edgeId: "edge_permitted" }]);
    } finally {
      stop();
    }
  });

  it("billing's lease recall reaches the edge holding the lease, which acks on billing's inbox", async () => {
    const edgeTls = (await testCertificates()).tls("edge");
    const client = createClient(BillingServiceClient, `127.0.0.1:${billing.billing.port}`, edgeTls);
    const table = new LeaseTable({ edgeId: `edge-${randomUUID()}`, billing: promiseClient(client), ttlMs: 1_000, log });
    const subject = names.leaseRecall(table.edgeId);
    const stop = followLeaseRecalls(as.edge, subject, table, log);
    await as.edge.flush();
    try {
      const accountId = randomUUID();
      const ticket = await table.admit({ accountId, tier: "free", atLeast: { credit: 100n, tokens: 10n } });
      await table.takeWorstCase(ticket, { credit: 100n, tokens: 10n, maxOutputTokens: 1n });
      const lease = table.leaseOf(accountId)!;
      const recall = LeaseRecall.encode(LeaseRecall.fromPartial({ leaseId: lease.leaseId })).finish();
      // Exactly what billing's recall sender sends (services/billing/src/leases/recall-sender.ts).
      const reply = await as.billing.request(subject, recall, { timeout: 2_000 });
      expect(reply.subject.startsWith("_INBOX_billing.")).toBe(true);
      expect(LeaseRecallAck.decode(reply.data)).toMatchObject({ edgeId: table.edgeId, known: true });
      expect(table.leaseOf(accountId)).toBeUndefined();

      // Nobody else may recall: another edge (all edges are one user), accounts, registry.
      for (const user of ["edge", "accounts", "registry"] as const) {
        await expect(as[user].request(subject, recall, { timeout: 2_000 })).rejects.toMatchObject(
          refusedRequest(subject),
        );
      }
      // An edge answers only the request it was sent: it cannot publish into billing's inbox.
      expect(await refusedPublish(as.edge, "_INBOX_billing.forged", new Uint8Array())).toMatchObject({
        subject: "_INBOX_billing.forged",
      });
    } finally {
      stop();
      client.close();
    }
  });

  it("no service may read another's inbox", async () => {
    const violation = nextViolation(as.registry);
    as.registry.subscribe("_INBOX_billing.>");
    expect(await violation).toMatchObject({ operation: "subscription", subject: "_INBOX_billing.>" });
    const plain = nextViolation(as.edge);
    as.edge.subscribe("_INBOX.>");
    expect(await plain).toMatchObject({ operation: "subscription", subject: "_INBOX.>" });
  });

  it("registry's catalog.changed reaches the edges and the other registries; the edge cannot send one", async () => {
    const change = CatalogChanged.encode({ hosterId: "h1" }).finish();
    for (const listener of ["edge", "registry"] as const) {
      const got = await received(as[listener], names.catalogChanged, async () => {
        as.registry.publish(names.catalogChanged, change);
        await as.registry.flush();
      });
      expect(got, listener).toHaveLength(1);
    }
    expect(await refusedPublish(as.edge, names.catalogChanged, change)).toMatchObject({
      subject: names.catalogChanged,
    });
  });
});
