import type { Route } from "@mkt/proto/registry/v1/registry";
import type { Ticket } from "../leases/lease-admission.ts";
import type { LeaseTable } from "../leases/lease-table.ts";
import { movesOn } from "./next-endpoint.ts";

/**
 * One request's endpoints, in the order drawn once when it arrived (candidateRoutes: its models,
 * an open model's endpoints by the default rule, its `provider` preferences or its conversation's
 * sticky order), and the one place that steps through them (docs/routing.md, "One order per
 * request, and failover"):
 *
 * - **admission** takes the request's room on the first endpoint that admits it (`admitOnFirst`);
 *   the prompt's fit and the balance then keep those it may reach (`keep`), in the same order;
 * - **the relay** enters each endpoint in turn (`enter`), which moves the request's plan room to
 *   it, and asks `movesOn` (next-endpoint.ts) whether a failure passes to the next one.
 *
 * An account key's request to an open endpoint holds that endpoint's plan room; any other request
 * holds none of an endpoint's own (a scoped key's plan is its subscription's, on every route).
 */
export class EndpointSteps {
  #routes: Route[];
  /** An account key's request: an open endpoint's plan is the endpoint's own. */
  readonly #accountKey: boolean;

  constructor(routes: readonly Route[], on: { subscriptionId: string }) {
    this.#routes = [...routes];
    this.#accountKey = on.subscriptionId === "";
  }

  /** The endpoints still to try, in order. */
  get routes(): readonly Route[] {
    return this.#routes;
  }

  /** True when the request holds `route`'s own plan room there (an account key, an open endpoint). */
  endpointPlan(route: Route): boolean {
    return this.#accountKey && route.open;
  }

  /**
   * Step one of admission on the first endpoint that admits: `admit` is given the endpoints left
   * (the first one's plan room is taken with the request). A refusal the rule moves on from passes
   * that endpoint over; with none left, or by the rule, the refusal is the answer.
   */
  async admitOnFirst<T>(admit: (routes: readonly Route[]) => Promise<T>): Promise<T> {
    for (;;) {
      try {
        return await admit(this.#routes);
      } catch (err) {
        const [first, ...rest] = this.#routes;
        if (rest.length === 0 || !movesOn(err, { endpointPlan: this.endpointPlan(first!), reachedClient: false })) {
          throw err;
        }
        this.#routes = rest;
      }
    }
  }

  /** The endpoints admission's second step kept (the prompt fits, the balance covers), in order. */
  keep(routes: readonly Route[]): void {
    this.#routes = this.#routes.filter((route) => routes.includes(route));
  }

  /**
   * The relay's hook before each endpoint it tries (the first one included), or undefined when no
   * endpoint has a plan room of its own to move. It moves the request's plan room to an open
   * endpoint's plan (one request in its minute, a slot, the worst case's tokens; the slot left
   * goes back) and names that plan's subscription for the usage event; a platform route holds no
   * plan room, so the slot of the plan the request leaves goes back. A refusal is the new plan's,
   * which the rule passes over.
   */
  enterHook(
    leases: Pick<LeaseTable, "moveToPlan">,
    ticket: Ticket,
    usage: { subscriptionId: string },
  ): ((route: Route) => Promise<void>) | undefined {
    if (!this.#routes.some((route) => this.endpointPlan(route))) return undefined;
    return async (route) => {
      if (this.endpointPlan(route)) {
        const current = ticket.lease.budgets.get(ticket.subscriptionId)?.terms?.productId;
        if (current !== route.productId) await leases.moveToPlan(ticket, route.productId);
      } else if (ticket.subscriptionId) {
        if (ticket.slot) ticket.slot.admitted -= 1n;
        ticket.slot = undefined;
        ticket.subscriptionId = "";
      }
      usage.subscriptionId = ticket.subscriptionId;
    };
  }
}
