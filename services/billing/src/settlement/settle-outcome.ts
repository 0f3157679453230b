// How one usage event's settlement ended: a module of types only, so that the metrics (which count
// outcomes) and the context that holds them import no settlement code.

/**
 * Why a lease event was refused, recorded at no cost (defence in depth behind NATS permissions,
 * docs/deploy.md "NATS users"): its lease is unknown, belongs to another account than the event
 * names, or never granted as much credit as the event's worst case.
 */
export type Refusal = "unknown_lease" | "foreign_lease" | "over_lease_credit";

/**
 * How an event's settlement ended: `late_settled` when its lease hold was already released (some
 * of it may be written off), `clamped` when charged no more than its lease still held for its
 * unsettled requests, `no_hold` when it named no lease (recorded at no cost), a refusal. None
 * is a drop: an event that cannot be settled is dead-lettered instead (docs/settlement.md).
 */
export type SettleOutcome = "settled" | "late_settled" | "clamped" | "duplicate" | "no_hold" | Refusal;
