import { Metadata, status } from "@grpc/grpc-js";
import type { CallSettings } from "@mkt/runtime/grpc-client";
import type { LeaseBilling } from "../../edge/src/leases/lease-table.ts";
import type { SeededRandom } from "./seeded-random.ts";

/** How often each fault hits one edge's lease calls (0 to 1 each). */
export interface Faults {
  /** The call never reaches billing. */
  dropCall: number;
  /** Billing applies the call; its reply never reaches the edge. */
  dropReply: number;
  /** The call, or its reply, is held on the wire until a later step delivers it (or its deadline passes). */
  delay: number;
  /** A copy of the call reaches billing again later (its reply is lost). */
  duplicate: number;
}

export const NO_FAULTS: Faults = { dropCall: 0, dropReply: 0, delay: 0, duplicate: 0 };

/** A call or reply held on the wire. */
interface Held {
  what: string;
  /** The edge's deadline for the call (sim time); a reply past it is lost, a call is still delivered. */
  deadline: number;
  /** The caller was already told the deadline passed. */
  expired: boolean;
  deliver(): void;
  expire(): void;
  /** Calls stay on the wire past their deadline (they may still reach billing); replies do not. */
  isCall: boolean;
}

/** Real billing calls never time out on the machine's clock: the simulation's deadlines decide. */
const REAL_TIMEOUT_MS = 60_000;

type Method = keyof LeaseBilling;

function grpcError(code: status, details: string): Error {
  return Object.assign(new Error(details), { code, details, metadata: new Metadata() });
}

/**
 * The network between the edges and billing: every lease call an edge makes goes through it, and
 * it drops, delays, duplicates and reorders calls and replies as each edge's faults say, drawing
 * from the step's random source. Deadlines are the edge's own (`timeoutMs` on the simulated
 * clock), so a reply held past one is lost exactly as a late reply is in production.
 */
export class FaultyWire {
  readonly held: Held[] = [];
  /** Calls billing is working on now: the simulation waits for them before it checks anything. */
  inFlight = 0;
  /** Billing is unreachable: every call fails before reaching it. */
  down = false;
  rng: SeededRandom;
  readonly #now: () => number;
  readonly #billing: () => LeaseBilling;

  constructor(billing: () => LeaseBilling, now: () => number, rng: SeededRandom) {
    this.#billing = billing;
    this.#now = now;
    this.rng = rng;
  }

  /** One edge's view of billing, with its faults (read at each call). */
  transport(faults: () => Faults): LeaseBilling {
    const method =
      <M extends Method>(name: M) =>
      (request: Parameters<LeaseBilling[M]>[0], settings?: CallSettings) =>
        this.#call(name, request, settings, faults());
    return {
      grantLease: method("grantLease"),
      heartbeat: method("heartbeat"),
      returnLeases: method("returnLeases"),
    } as LeaseBilling;
  }

  /** Delivers the held message at `index` (modulo their number): replies come back in any order. */
  deliver(index: number): void {
    if (this.held.length === 0) return;
    const [message] = this.held.splice(index % this.held.length, 1);
    message!.deliver();
  }

  /** Drops the held message at `index`: a call that never arrives, a reply never seen. */
  lose(index: number): void {
    if (this.held.length === 0) return;
    const [message] = this.held.splice(index % this.held.length, 1);
    if (!message!.expired) message!.expire();
  }

  /** The clock moved: callers whose deadline passed are told so; their replies are gone. */
  expire(): void {
    const now = this.#now();
    for (const message of [...this.held]) {
      if (message.expired || now < message.deadline) continue;
      message.expired = true;
      message.expire();
      if (!message.isCall) this.held.splice(this.held.indexOf(message), 1);
    }
  }

  /** Everything held is delivered (calls in order sent, then replies): a healed network. */
  flush(): void {
    while (this.held.length > 0) this.deliver(0);
  }

  #call<M extends Method>(
    name: M,
    request: Parameters<LeaseBilling[M]>[0],
    settings: CallSettings | undefined,
    faults: Faults,
  ): Promise<unknown> {
    const deadline = this.#now() + (settings?.timeoutMs ?? REAL_TIMEOUT_MS);
    return new Promise((resolve, reject) => {
      let answered = false;
      const answer = (done: () => void) => {
        if (answered) return;
        answered = true;
        done();
      };
      const fail = (code: status, why: string) => answer(() => reject(grpcError(code, why)));
      const expired = () => fail(status.DEADLINE_EXCEEDED, `simulated: ${name} deadline passed`);
      const send = (onReply: (reply: unknown) => void, onError: (err: unknown) => void) => {
        if (this.down) return onError(grpcError(status.UNAVAILABLE, "simulated: billing unreachable"));
        this.inFlight += 1;
        const real = this.#billing()[name] as (r: typeof request, s: CallSettings) => Promise<unknown>;
        real(request, { timeoutMs: REAL_TIMEOUT_MS }).then(
          (reply) => {
            this.inFlight -= 1;
            onReply(reply);
          },
          (err: unknown) => {
            this.inFlight -= 1;
            onError(err);
          },
        );
      };
      const replied = (reply: unknown) => {
        if (this.rng.chance(faults.dropReply)) return fail(status.UNAVAILABLE, `simulated: ${name} reply lost`);
        if (!this.rng.chance(faults.delay)) return answer(() => resolve(reply));
        this.held.push({
          what: `${name} reply`,
          deadline,
          expired: false,
          isCall: false,
          deliver: () => answer(() => resolve(reply)),
          expire: expired,
        });
      };
      const errored = (err: unknown) => answer(() => reject(err));
      if (this.rng.chance(faults.dropCall)) return fail(status.UNAVAILABLE, `simulated: ${name} call lost`);
      if (this.rng.chance(faults.duplicate)) {
        // The copy's reply goes nowhere: the edge heard the first.
        const ignore = () => undefined;
        this.held.push({
          what: `${name} copy`,
          deadline: Infinity,
          expired: false,
          isCall: true,
          deliver: () => send(ignore, ignore),
          expire: ignore,
        });
      }
      if (!this.rng.chance(faults.delay)) return send(replied, errored);
      this.held.push({
        what: `${name} call`,
        deadline,
        expired: false,
        isCall: true,
        // Delivered after its deadline, billing still applies it; the edge gave up on it already.
        deliver: () => send(replied, errored),
        expire: expired,
      });
    });
  }
}
