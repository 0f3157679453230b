import { AppError } from "@mkt/runtime/errors";
import { newTimeOrderedId } from "@mkt/runtime/ids";

/**
 * Who this process is to billing (docs/leases.md#incarnations): its stable EDGE_ID, a boot id of
 * its own, and the incarnation number billing gave it. The first call answered gives the number,
 * and with it billing has closed every lease of the earlier processes under the id. A process
 * billing refused as superseded (another took the next incarnation, closing this one's leases) is
 * so for good: it admits nothing more rather than take the id back, which would make two live
 * processes close each other's leases over and over.
 */
export class EdgeIncarnation {
  readonly edgeId: string;
  /**
   * This process's own: billing tells its calls from those of an earlier process under the same id.
   * A UUIDv7, so it also says when the process started: billing never lets an earlier process's
   * late first call take the id from a later one.
   */
  readonly bootId = newTimeOrderedId();
  #number = 0n;
  #superseded = false;

  constructor(edgeId: string) {
    this.edgeId = edgeId;
  }

  /** Billing's number for this process: 0 until a reply gives it (billing then takes the next). */
  get number(): bigint {
    return this.#number;
  }

  get superseded(): boolean {
    return this.#superseded;
  }

  /** Who is calling, in every lease call. */
  caller(): { edgeId: string; incarnation: bigint; bootId: string } {
    return { edgeId: this.edgeId, incarnation: this.#number, bootId: this.bootId };
  }

  /** Billing answered a call in `incarnation`: the first answer gives this process its number. */
  answered(incarnation: bigint): void {
    if (this.#number === 0n) this.#number = incarnation;
  }

  /** Billing refused this process as superseded. True the first time (the caller then drops everything). */
  supersede(): boolean {
    if (this.#superseded) return false;
    this.#superseded = true;
    return true;
  }
}

/** Billing answered `edge_superseded`: another process took this edge's id. */
export const isSuperseded = (error: AppError) => error.code === "edge_superseded";

/** What a client is told by an edge another process replaced (never a 402/429). */
export function supersededError(cause?: unknown): AppError {
  return new AppError("service_unavailable", "This server was replaced by another; please retry the request.", {
    cause: cause ?? "edge superseded",
  });
}
