import { randomUUID } from "node:crypto";
import { newRequestId } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import { createLogger } from "@mkt/runtime/logger";
import { costMicros } from "@mkt/runtime/money";
import { eventNames } from "@mkt/runtime/nats";
import type { NatsConnection } from "@mkt/runtime/nats";
import { LeaseTable } from "../../edge/src/leases/lease-table.ts";
import { followLeaseRecalls } from "../../edge/src/leases/lease-recall.ts";
import type { IsolationWatch } from "../../edge/src/leases/isolation-watch.ts";
import type { Ticket } from "../../edge/src/leases/lease-admission.ts";
import type { LeaseBilling } from "../../edge/src/leases/lease-table.ts";
import { FaultyWire, NO_FAULTS, type Faults } from "./faulty-wire.ts";
import { SeededRandom } from "./seeded-random.ts";
import { ACCOUNTS, EDGES, type NatsMode, type Step } from "./lease-steps.ts";
import { LIMIT_PER_MINUTE, MIN_TTL_MS, START_SETTINGS, type SimBilling } from "./sim-billing.ts";

const log = createLogger("lease-simulation", "silent");
/** One micro-USD per token in and out: a worst case in micros is its token count. */
const PRICE = 1_000_000n;
const INPUT_TOKENS = 100n;
const SUBSCRIBER_TOKENS = 100n;
/**
 * The edge's own LEASE_IDLE_MS (not billing's: it stays when billing's TTL changes), 2 TTL of the
 * settings runs start with, as the fault tests set it.
 */
const IDLE_MS = 2 * START_SETTINGS.ttlMs;
/** Steps after which billing may release a lease's hold at once. */
const RELEASING = new Set<Step["kind"]>(["crash", "takeover", "closer", "billingRestart", "quiet"]);

/**
 * One edge process: its table, its faults, its NATS. A crash replaces the process under the same
 * id (this object, booted again); a takeover starts another object under the id beside it.
 */
export interface SimEdge {
  readonly id: string;
  table: LeaseTable;
  /** The incarnation billing's replies gave the process (0 until one), as its EdgeIncarnation holds it. */
  incarnation: bigint;
  /**
   * Billing was seen (after a step) to have started a newer incarnation of the id: it holds none
   * of this process's room any more.
   */
  superseded: boolean;
  /** The process's own monotonic clock starts anywhere. */
  offset: number;
  faults: Faults;
  nats: NatsMode;
  dead: boolean;
  /** The send time (its clock) of the last lease call billing answered: its isolation bound counts from it. */
  lastContact: number;
  /** When its last heartbeat was sent (its clock). */
  lastBeat: number;
  unsubscribe: () => void;
}

/**
 * A request: admitted (both steps) or refused, then running until an `end` step or its process
 * dies. `orphaned`: still running on a process billing superseded, which released its room at the
 * new incarnation as it does a dead process's (docs/leases.md#incarnations); its usage settles as a
 * late event.
 */
export interface SimCall {
  readonly requestId: string;
  readonly edge: SimEdge;
  readonly table: LeaseTable;
  readonly accountId: string;
  readonly subscriber: boolean;
  state: "admitting" | "running" | "orphaned" | "ended" | "refused" | "dead";
  /** Admitted by a process after billing was seen to have superseded it: a violation. */
  afterSuperseded?: boolean;
  ticket?: Ticket;
  worstCase: bigint;
  /** Billing's clock when it was admitted (ms). */
  admittedAt?: number;
  /** The simulation's time when it was admitted: the relay's timeout ends it MAX_REQUEST_MS − 10 s later. */
  startedAt?: number;
  refusal?: AppError;
}

/** A usage event published for an ended call and not yet seen settled. */
export interface Unsettled {
  requestId: string;
  leaseId: string;
  worstCase: bigint;
}

/** What a crash left for billing to close: the dead process's leases, once a newer incarnation is known. */
export interface Crashed {
  edgeId: string;
  incarnation: bigint;
  leaseIds: string[];
}

/**
 * Several edges' real lease tables (edge/src/leases) in one process, against a real billing and
 * PostgreSQL, their lease calls through a FaultyWire and their recalls through real NATS. Time is
 * the simulation's: every edge's monotonic clock and billing's wall clock read it, so a step that
 * advances it is the only way anything lapses.
 */
export class LeaseWorld {
  readonly sim: SimBilling;
  readonly wire: FaultyWire;
  /** Each edge's current process (the one a crash or a takeover started last). */
  readonly edges: SimEdge[] = [];
  /** Processes a takeover replaced while still running; the next quiet point stops them. */
  readonly stale: SimEdge[] = [];
  readonly accounts: string[] = [];
  readonly subscriber = { accountId: randomUUID(), subscriptionId: randomUUID(), hosterId: randomUUID() };
  /** max_concurrent now, and the largest in force since no call of the subscriber was running. */
  maxConcurrent = 3;
  concurrencyCap = 3;
  paused = false;
  readonly limitPerMinute = LIMIT_PER_MINUTE;
  readonly calls: SimCall[] = [];
  unsettled: Unsettled[] = [];
  readonly crashed: Crashed[] = [];
  /** Requests answered 429 for concurrency while fewer than max_concurrent were running (not a failure by itself). */
  blamed = 0;
  /** Those 429s by what they said (figures left out). */
  readonly blamedFor = new Map<string, number>();
  /** The simulation's time in ms (the edges' clocks are offsets of it). */
  now = 0;
  /** How far billing's wall clock is stepped from the simulation's time. */
  billingSkew = 0;
  #rng = new SeededRandom(1);
  #pending = new Set<Promise<unknown>>();
  readonly #subject: (edgeId: string) => string;

  private constructor(sim: SimBilling) {
    this.sim = sim;
    this.wire = new FaultyWire(
      () => sim.edges,
      () => this.now,
      this.#rng,
    );
    this.#subject = eventNames(sim.t.config.EVENTS_PREFIX).leaseRecall;
  }

  /** A fresh world on `sim`: its own accounts, subscriber and edges, billing's clock an hour on. */
  static async create(sim: SimBilling): Promise<LeaseWorld> {
    // A run starts on billing's first settings, whatever the last run left: a replay must replay.
    const { ttlMs, isolationMs } = sim.settings;
    if (ttlMs !== START_SETTINGS.ttlMs || isolationMs !== START_SETTINGS.isolationMs) {
      await sim.restart(START_SETTINGS);
    }
    sim.clockMs += 3_600_000 - (sim.clockMs % 60_000) + 10_000;
    const world = new LeaseWorld(sim);
    for (let i = 0; i < ACCOUNTS; i++) world.accounts.push(randomUUID());
    const { accountId, subscriptionId, hosterId } = world.subscriber;
    const day = 86_400_000;
    await sim.t.query(
      `insert into subscriptions (id, account_id, idempotency_key, product_id, status, hoster_id, pricing_model,
         included_tokens, rpm_limit, tpm_limit, max_concurrent, max_output_tokens, max_context_tokens,
         period_index, period_start, period_end, activated_at, created_at)
       values ($1, $2, 'k', $3, 'active', $4, 'free', 0, 600, 10000000, $5, 4096, 8192, 0, $6, $7, $6, $6)`,
      [
        subscriptionId,
        accountId,
        randomUUID(),
        hosterId,
        world.maxConcurrent,
        new Date(sim.clockMs - day),
        new Date(sim.clockMs + 30 * day),
      ],
    );
    for (let i = 0; i < EDGES; i++) world.edges.push(world.#startEdge(`sim-edge-${randomUUID()}`));
    return world;
  }

  /** Billing's clock now (ms). */
  get billingNow(): number {
    return this.sim.clockMs;
  }

  #startEdge(id: string): SimEdge {
    const edge = {
      id,
      offset: this.#rng.int(0, 1_000_000),
      faults: NO_FAULTS,
      nats: "ok",
      dead: false,
      incarnation: 0n,
      superseded: false,
    } as SimEdge;
    this.#boot(edge);
    return edge;
  }

  /** A new process under the edge's id: its table, its recall subscription, its first heartbeat. */
  #boot(edge: SimEdge): void {
    const process = { dead: false };
    edge.dead = false;
    edge.lastContact = this.now + edge.offset;
    // The edge's isolation watch as the table tells it of billing's answers; `advance` ends the
    // calls of an edge cut off for its EDGE_ISOLATION_MS, as the watch's timer does in production.
    // A process told it was superseded ends its answers at once through it.
    const isolation = {
      contact: (sentAt: number) => {
        if (!process.dead && sentAt > edge.lastContact) edge.lastContact = sentAt;
      },
      end: () => this.#background(this.#endSuperseded(edge)),
      setBound: () => undefined,
    } as unknown as IsolationWatch;
    edge.incarnation = 0n;
    edge.superseded = false;
    // No TTL of its own: until billing's first reply it paces by billing's default, as in
    // production, then by what billing's replies say (lease-settings.ts).
    edge.table = new LeaseTable({
      isolation,
      edgeId: edge.id,
      billing: this.#transport(edge, process),
      idleMs: IDLE_MS,
      log,
      now: () => this.now + edge.offset,
    });
    const table = edge.table;
    const nc = this.#recallsOf(edge) as unknown as NatsConnection;
    const unsubscribe = followLeaseRecalls(nc, this.#subject(edge.id), table, log);
    edge.unsubscribe = () => {
      process.dead = true;
      unsubscribe();
    };
    // As at start: the first heartbeat takes the process's incarnation.
    edge.lastBeat = -Infinity;
    this.#beat(edge);
  }

  /** The process's view of billing through the wire, noting the incarnation billing's replies give it. */
  #transport(edge: SimEdge, process: { dead: boolean }): LeaseBilling {
    const wire = this.wire.transport(() => (process.dead ? { ...NO_FAULTS, dropCall: 1 } : edge.faults));
    const noted = <R extends { incarnation: bigint }>(reply: R): R => {
      if (!process.dead && edge.incarnation === 0n) edge.incarnation = reply.incarnation;
      return reply;
    };
    return {
      grantLease: (request, settings) => wire.grantLease(request, settings).then(noted),
      heartbeat: (request, settings) => wire.heartbeat(request, settings).then(noted),
      returnLeases: (request, settings) => wire.returnLeases(request, settings).then(noted),
    };
  }

  /** The edge's NATS as its recall handler sees it: paused (nothing arrives) or losing its acks. */
  #recallsOf(edge: SimEdge) {
    const nc = this.sim.nc;
    return {
      subscribe: (
        subject: string,
        opts: { callback: (err: Error | null, msg: { data: Uint8Array; respond(d: Uint8Array): boolean }) => void },
      ) =>
        nc.subscribe(subject, {
          callback: (err, msg) => {
            if (edge.nats === "paused") return;
            opts.callback(err, {
              data: msg.data,
              respond: (data: Uint8Array) => (edge.nats === "ackLost" ? true : msg.respond(data)),
            });
          },
        }),
    };
  }

  #background(work: Promise<unknown>): void {
    const tracked = work.catch(() => undefined).finally(() => this.#pending.delete(tracked));
    this.#pending.add(tracked);
  }

  /** Runs one step to quiescence: every call it started is answered, held on the wire, or waiting on the clock. */
  async run(step: Step): Promise<void> {
    this.wire.rng = this.#rng = new SeededRandom(step.seed);
    // Settlement trails an answer by milliseconds, a release comes seconds later at the earliest
    // (a restarted edge's first call, the closer): the simulation keeps that order, so that a
    // late event (charged what the balance has, docs/leases.md#incarnations) is not mistaken for
    // an overspend. With two processes under one id any lease call may start an incarnation.
    const releasing = RELEASING.has(step.kind) || this.stale.some((p) => !p.dead);
    if (releasing && this.unsettled.length > 0) await this.sim.t.waitSettled();
    switch (step.kind) {
      case "advance":
        await this.advance(step.ms);
        break;
      case "beat":
        // Every process under the id beats on its own timer.
        for (const sibling of this.#processesOf(step.edge)) this.#beat(sibling);
        break;
      case "call": {
        const account = this.accounts[step.account]!;
        this.#startCall(this.#servingProcess(step.edge, step.seed), account, BigInt(step.outputTokens));
        break;
      }
      case "subscriberCall":
        this.subscriberCall(this.#servingProcess(step.edge, step.seed));
        break;
      case "end":
        await this.#endCall(step.pick, step.outputShare);
        break;
      case "deliver":
        this.wire.deliver(step.pick);
        break;
      case "lose":
        this.wire.lose(step.pick);
        break;
      case "faults":
        this.edges[step.edge]!.faults = step.faults;
        break;
      case "billingDown":
        this.wire.down = true;
        break;
      case "billingUp":
        this.wire.down = false;
        break;
      case "billingRestart":
        await this.settle();
        await this.sim.restart(step.settings);
        break;
      case "crash":
        await this.crash(this.edges[step.edge]!);
        break;
      case "takeover":
        await this.#takeover(step.edge, step.resumeAfterMs);
        break;
      case "nats":
        this.edges[step.edge]!.nats = step.mode;
        break;
      case "pause":
      case "resume":
        await this.#pauseOrResume(step.kind === "pause");
        break;
      case "planEdit":
        await this.#planEdit(step.maxConcurrent);
        break;
      case "clockJump":
        await this.#clockJump(step.edge, step.ms);
        break;
      case "closer":
        await this.sim.t.billing.closeDueLeases();
        break;
      case "topUp":
        await this.sim.t.client.addCredits({
          accountId: this.accounts[step.account]!,
          amountMicros: BigInt(step.micros),
          idempotencyKey: randomUUID(),
        });
        break;
      case "quiet":
        // The quiet point's own check runs in check-world.ts (it needs the invariants).
        break;
    }
    await this.settle();
    await this.#noteSuperseded();
  }

  /** The edge's live processes: its current one, and any a takeover left running. */
  #processesOf(edge: number): SimEdge[] {
    const current = this.edges[edge]!;
    return [current, ...this.stale.filter((p) => p.id === current.id && !p.dead)];
  }

  /** Every live process, current or stale. */
  processes(): SimEdge[] {
    return [...this.edges, ...this.stale.filter((p) => !p.dead)];
  }

  /** Which of the edge's processes a request reaches: the balancer sends to any of them. */
  #servingProcess(edge: number, seed: number): SimEdge {
    const processes = this.#processesOf(edge);
    return processes[seed % processes.length]!;
  }

  /**
   * After each step, while two processes share an id: one whose incarnation billing has passed is
   * superseded. Billing released its room then (the calls it runs are orphaned, as a dead
   * process's), and from now on it must admit nothing.
   */
  async #noteSuperseded(): Promise<void> {
    if (this.stale.every((p) => p.dead)) return;
    const watched = this.processes().filter((p) => !p.superseded && p.incarnation > 0n);
    if (watched.length === 0) return;
    const sessions = await this.sim.t.query<{ edge_id: string; incarnation: string }>(
      `select edge_id, incarnation::text from edge_sessions where edge_id = any($1)`,
      [[...new Set(watched.map((p) => p.id))]],
    );
    const newest = new Map(sessions.map((s) => [s.edge_id, BigInt(s.incarnation)]));
    for (const candidate of watched) {
      if ((newest.get(candidate.id) ?? 0n) <= candidate.incarnation) continue;
      candidate.superseded = true;
      for (const call of this.calls) {
        if (call.table === candidate.table && call.state === "running") call.state = "orphaned";
      }
    }
  }

  /**
   * Sim time passes for every clock; callers whose deadline passed on the wire learn it; calls
   * that ran past the relay's bound, or on an edge cut off from billing for its EDGE_ISOLATION_MS,
   * end (billed what was relayed), as they do in production.
   */
  async advance(ms: number): Promise<void> {
    this.now += ms;
    this.sim.clockMs += ms;
    this.wire.expire();
    await this.#endOverdue();
  }

  /** Each process by the bounds billing told it (the edge keeps the shortest it was told). */
  async #endOverdue(): Promise<void> {
    for (const call of [...this.running(), ...this.orphaned()]) {
      const edgeNow = this.now + call.edge.offset;
      const { settings } = call.table;
      const cutOff = edgeNow - call.edge.lastContact >= settings.isolationMs;
      const overdue = this.now - call.startedAt! >= settings.upstreamTotalMs();
      if (cutOff || overdue) await this.endCall(call, this.#rng.next());
    }
  }

  /**
   * A clock steps: an edge's monotonic clock leaps forward (a process frozen, then resumed), or
   * billing's wall clock is stepped (by NTP) to within half a TTL of the edges' time either way:
   * half the shortest TTL billing may run with, so that a restart with a shorter TTL never leaves
   * a skew beyond half of it.
   */
  async #clockJump(edge: number, ms: number): Promise<void> {
    if (edge >= 0) {
      this.edges[edge]!.offset += ms;
      await this.#endOverdue();
      return;
    }
    const skew = Math.max(-MIN_TTL_MS / 2, Math.min(MIN_TTL_MS / 2, ms));
    this.sim.clockMs += skew - this.billingSkew;
    this.billingSkew = skew;
  }

  /** Waits until billing answered every call on its way and the edges acted on the answers. */
  async settle(): Promise<void> {
    const deadline = performance.now() + 10_000;
    for (let quiet = 0; quiet < 3 && performance.now() < deadline;) {
      await new Promise((resolve) => setTimeout(resolve, 2));
      quiet = this.wire.inFlight === 0 ? quiet + 1 : 0;
    }
  }

  /** A request of the subscriber's scoped key on `edge` (a free plan: slots and tokens, no credit). */
  subscriberCall(edge: SimEdge): SimCall {
    return this.#startCall(edge, this.subscriber.accountId, 0n, this.subscriber.subscriptionId);
  }

  /** Every edge sends its heartbeat now (if half a TTL has passed since its last). */
  beatAll(): void {
    for (const edge of this.edges) this.#beat(edge);
  }

  /**
   * A heartbeat, paced as lease-heartbeat.ts paces them: at least half the TTL the process last
   * heard from billing after the previous one's send. (A report's demand is per second since the
   * previous beat: two beats a millisecond apart would ask for a thousand times the demand.)
   */
  #beat(edge: SimEdge): void {
    const now = this.now + edge.offset;
    if (now - edge.lastBeat < edge.table.ttlMs / 2) return;
    edge.lastBeat = now;
    this.#background(edge.table.beat());
  }

  #startCall(edge: SimEdge, accountId: string, outputTokens: bigint, subscriptionId?: string): SimCall {
    const table = edge.table;
    const call: SimCall = {
      requestId: newRequestId(),
      edge,
      table,
      accountId,
      subscriber: subscriptionId !== undefined,
      state: "admitting",
      worstCase: subscriptionId ? 0n : costMicros(INPUT_TOKENS, outputTokens, PRICE, PRICE),
    };
    this.calls.push(call);
    const tokens = subscriptionId ? SUBSCRIBER_TOKENS : 0n;
    const wanted = { credit: call.worstCase, tokens, maxOutputTokens: outputTokens };
    const admitting = (async () => {
      const tier = subscriptionId ? "subscriber" : "free";
      const ticket = await table.admit({ accountId, tier, subscriptionId, keyId: "", atLeast: wanted });
      try {
        return await table.takeWorstCase(ticket, wanted);
      } catch (err) {
        table.release(ticket);
        throw err;
      }
    })();
    this.#background(
      admitting.then(
        (ticket) => {
          call.ticket = ticket;
          call.admittedAt = this.billingNow;
          call.startedAt = this.now;
          // Its process died meanwhile: the call died with it (nothing published, nothing released).
          if (edge.table !== table || edge.dead) call.state = "dead";
          else if (edge.superseded) {
            // Billing released this process's room already: nothing it admits now is covered.
            call.state = "orphaned";
            call.afterSuperseded = true;
          } else call.state = "running";
        },
        (err: unknown) => {
          call.state = "refused";
          call.refusal = err instanceof AppError ? err : AppError.fromGrpc(err);
          if (call.subscriber && call.refusal.httpStatus === 429 && this.running(true).length < this.maxConcurrent) {
            this.blamed += 1;
            const reason = call.refusal.message.replace(/\d+/g, "#");
            this.blamedFor.set(reason, (this.blamedFor.get(reason) ?? 0) + 1);
          }
        },
      ),
    );
    return call;
  }

  /** Calls running on live processes (the subscriber's only, with `subscriber`). */
  running(subscriber?: boolean): SimCall[] {
    return this.calls.filter((c) => c.state === "running" && (subscriber === undefined || c.subscriber === subscriber));
  }

  /** Calls running on processes billing superseded. */
  orphaned(): SimCall[] {
    return this.calls.filter((c) => c.state === "orphaned");
  }

  /** Ends the running call at `pick`: its slot goes back, and its usage (cost ≤ worst case) is published. */
  async #endCall(pick: number, outputShare: number): Promise<void> {
    const running = [...this.running(), ...this.orphaned()];
    if (running.length === 0) return;
    await this.endCall(running[pick % running.length]!, outputShare);
  }

  async endCall(call: SimCall, outputShare = 1): Promise<void> {
    const ticket = call.ticket!;
    // An orphaned call's hold went with its process's incarnation: its usage is a late event,
    // charged what the balance has (docs/leases.md#incarnations), not a settlement to check.
    const late = call.state === "orphaned";
    call.state = "ended";
    call.table.release(ticket);
    if (call.subscriber || ticket.worstCaseMicros === 0n) return;
    const maxOutput = ticket.maxOutputTokens;
    const outputTokens = BigInt(Math.floor(Number(maxOutput) * outputShare));
    const leaseId = ticket.lease.leaseId;
    if (!late) this.unsettled.push({ requestId: call.requestId, leaseId, worstCase: ticket.worstCaseMicros });
    await this.sim.t.publishUsage({
      requestId: call.requestId,
      accountId: call.accountId,
      keyId: "key_sim",
      modelId: "demo-small",
      provider: "local",
      inputTokens: INPUT_TOKENS,
      outputTokens,
      inputPricePer1mMicros: PRICE,
      outputPricePer1mMicros: PRICE,
      success: true,
      latencyMs: 10n,
      leaseId,
      worstCaseMicros: ticket.worstCaseMicros,
      worstCaseTokens: ticket.worstCaseTokens,
      // As the edge does: the request's receipt time, on the simulated clock.
      startedAt: new Date(call.startedAt ?? this.now).toISOString(),
    });
  }

  /**
   * The edge's process dies (its calls with it: their usage was never published) and one starts
   * under the same id at once, whose first heartbeat takes the next incarnation.
   */
  async crash(edge: SimEdge): Promise<void> {
    const [session] = await this.sim.t.query<{ incarnation: string }>(
      `select incarnation::text from edge_sessions where edge_id = $1`,
      [edge.id],
    );
    const leases = await this.sim.t.query<{ id: string }>(
      `select id from leases where edge_id = $1 and status <> 'closed'`,
      [edge.id],
    );
    const held = leases.map((l) => l.id);
    edge.unsubscribe();
    edge.dead = true;
    for (const call of this.calls) {
      if (call.table === edge.table && (call.state === "running" || call.state === "orphaned")) call.state = "dead";
    }
    this.crashed.push({ edgeId: edge.id, incarnation: BigInt(session?.incarnation ?? "0"), leaseIds: held });
    edge.offset = this.#rng.int(0, 1_000_000);
    this.#boot(edge);
  }

  /**
   * A new process starts under the edge's id while the current one still lives. The new one's
   * first heartbeat takes the next incarnation; the old one learns it is superseded only from a
   * lease call of its own. Frozen (`resumeAfterMs`), it resumes with its clock leapt past its
   * leases' validity: an orchestrator replaces a process that stopped answering for longer than a
   * TTL (a liveness probe's seconds). Otherwise it runs on beside the new one, holding its leases
   * in memory.
   */
  async #takeover(index: number, resumeAfterMs: number | undefined): Promise<void> {
    const old = this.edges[index]!;
    this.stale.push(old);
    this.edges[index] = this.#startEdge(old.id);
    await this.settle();
    await this.#noteSuperseded();
    if (resumeAfterMs === undefined) return;
    old.offset += old.table.ttlMs + resumeAfterMs;
    await this.#endOverdue();
  }

  /** A process billing refused as superseded ends its answers in flight (isolation.end). */
  async #endSuperseded(edge: SimEdge): Promise<void> {
    const table = edge.table;
    const mine = this.calls.filter((c) => c.table === table && (c.state === "running" || c.state === "orphaned"));
    // Billing refused it only after a newer incarnation released its room: each call is orphaned.
    for (const call of mine) call.state = "orphaned";
    for (const call of mine) await this.endCall(call, this.#rng.next());
  }

  /**
   * At a quiet point the takeover is over: each replaced process is stopped (its answers end, and
   * it returns its leases, which does nothing once superseded), and a current process that was
   * superseded in turn (the old one took the id back) fails its readiness and is restarted.
   */
  async #stopStale(): Promise<void> {
    for (const old of this.stale.filter((p) => !p.dead)) {
      // Its running calls end first (their usage settles on its leases), then its orphaned ones.
      for (const state of ["running", "orphaned"] as const) {
        for (const call of this.calls.filter((c) => c.table === old.table && c.state === state)) {
          await this.endCall(call, 0.5);
        }
      }
      await old.table.returnAll().catch(() => undefined);
      old.unsubscribe();
      old.dead = true;
    }
    await this.settle();
    // A restart releases every lease of the id at once: what the stopped process's calls owe
    // settles first, as before any step that releases.
    if (this.unsettled.length > 0) await this.sim.t.waitSettled();
    for (const edge of this.edges) if (edge.table.superseded) await this.crash(edge);
  }

  async #pauseOrResume(pause: boolean): Promise<void> {
    if (pause === this.paused) return;
    const { hosterId, subscriptionId } = this.subscriber;
    const call = pause ? this.sim.t.client.pauseSubscription : this.sim.t.client.resumeSubscription;
    // Its answer describes the subscriber with registry's plan, which no registry answers here:
    // the change and the fence have committed by then, and the recalls have been answered.
    await call({ hosterId, subscriptionId }).catch(() => undefined);
    this.paused = pause;
  }

  /** The hoster's plan changes its max_concurrent (the subscription's terms follow it). */
  async #planEdit(maxConcurrent: number): Promise<void> {
    await this.sim.t.query(`update subscriptions set max_concurrent = $1 where id = $2`, [
      maxConcurrent,
      this.subscriber.subscriptionId,
    ]);
    this.maxConcurrent = maxConcurrent;
    if (maxConcurrent > this.concurrencyCap) this.concurrencyCap = maxConcurrent;
  }

  /** Every fault healed: billing up, NATS answering, the wire delivering and empty. */
  async heal(): Promise<void> {
    this.wire.down = false;
    // A replaced process's too: its faults would hold the calls it stops with on the wire.
    for (const edge of this.processes()) {
      edge.faults = NO_FAULTS;
      edge.nats = "ok";
    }
    this.wire.flush();
    await this.settle();
    if (this.paused) await this.#pauseOrResume(false);
    await this.#stopStale();
  }

  /** Background work still running (admissions waiting on a window, heartbeats held on the wire). */
  get pending(): number {
    return this.#pending.size;
  }

  async close(): Promise<void> {
    for (const edge of this.processes()) edge.unsubscribe();
    this.wire.down = true;
    this.wire.flush();
    await this.settle();
  }
}
