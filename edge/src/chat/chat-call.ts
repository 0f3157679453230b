import type { FastifyReply, FastifyRequest } from "fastify";
import type { Route } from "@mkt/proto/registry/v1/registry";
import { AppError } from "@mkt/runtime/errors";
import { maximumPromptTokens } from "@mkt/runtime/token-bounds";
import { answerCutoff } from "../leases/isolation-watch.ts";
import { principalOf } from "../plugins/api-key-auth.ts";
import { relayAnswer, type RelayEvent } from "../relay/relay-answer.ts";
import type { RelayRequest } from "../relay/relay-request.ts";
import type { RouteDeps } from "../routes/route-deps.ts";
import type { ProviderPreferences } from "../routing/provider-preferences.ts";
import type { Ticket } from "../leases/lease-admission.ts";
import { candidateRoutes } from "./candidate-routes.ts";
import type { ChatBody } from "./chat-body.ts";
import { admitOnBound, admitRequest, admitWorstCase, rateLimitHeaders } from "./lease-admit.ts";
import { modelChoices } from "./model-choices.ts";

/** A chat request as the relay will send it. */
export interface ChatToRelay {
  body: ChatBody;
  /** `body` serialized: the bytes the relay forwards (the client's own, for chat completions). */
  bytes: Buffer;
  /** The request field that holds the prompt, named by a context-length error. */
  promptParam: string;
  /** The request's `provider` preferences (open models' routing). */
  provider?: ProviderPreferences;
}

export interface StartedChat {
  /** The relay's events; the request's place in the lease goes back when they end. */
  events: AsyncGenerator<RelayEvent, void, undefined>;
  /** The first model's route (with fallbacks, the chunks name the one that answered). */
  route: Route;
}

function contextTooLong(limit: number, param: string): AppError {
  return new AppError(
    "context_length_exceeded",
    `This model's maximum context length is ${limit} tokens, but the ${param === "messages" ? "messages use" : `${param} uses`} more than ${limit} tokens.`,
    { param },
  );
}

/**
 * The hot path every chat-shaped public API shares, in this one process: cached authentication
 * (done by the route's onRequest), route resolution from the routing table (of `model` and any
 * `models` fallbacks), admission against the edge's lease for the account (one request taken,
 * the prompt counted against the models' context, then the worst case of the dearest), then the
 * relay to the first upstream that answers (relay/relay-answer.ts), which meters the answer and
 * publishes its usage event. Settlement happens later, in billing. The caller writes the answer
 * (relayCompletion, in its API's format).
 */
export async function startChatCall(
  deps: RouteDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  chat: ChatToRelay,
): Promise<StartedChat> {
  const receivedAt = Date.now();
  const principal = principalOf(request);
  const { body, bytes } = chat;

  let candidates = await candidateRoutes(deps, principal.scope, modelChoices(body), {
    n: body.n ?? 1,
    provider: chat.provider,
  });

  // The largest context among the models is the largest this prompt could be served with (a plan
  // only narrows it, at admission): past it, counting stops and the prompt is refused here.
  const contextLimit = Number(candidates.reduce((most, r) => (r.contextWindow > most ? r.contextWindow : most), 0n));
  const countPrompt = async () => {
    const promptTokens = await deps.promptTokens.count({
      accountId: principal.accountId,
      body: bytes,
      messages: body.messages,
      tools: body.tools,
      limit: contextLimit,
    });
    if (promptTokens > contextLimit) throw contextTooLong(contextLimit, chat.promptParam);
    return promptTokens;
  };
  const requested = body.max_completion_tokens ?? body.max_tokens ?? 0;
  const choices = body.n ?? 1;
  // Admitted against the edge's lease for the account, in memory when warm; a scoped key's
  // request against its subscription's budget nested in that lease.
  const subscriptionId = principal.scope?.subscriptionId ?? "";
  let need = {
    accountId: principal.accountId,
    tier: principal.tier,
    subscriptionId,
    keyId: principal.keyId,
    routes: candidates,
    requested: BigInt(requested),
    choices: BigInt(choices < 1 ? 1 : choices),
  };
  const admitting = performance.now();
  let ticket: Ticket;
  for (;;) {
    try {
      ticket = await admitRequest(deps.leases, need);
      break;
    } catch (err) {
      // An open endpoint whose plan refuses the account (the hoster paused it, the plan's limits
      // are reached) is passed over for the next one; the last one's refusal is the answer.
      if (!(candidates[0]!.open && candidates.length > 1 && err instanceof AppError && err.httpStatus < 500)) throw err;
      if (err.code === "insufficient_credits" || err.code === "key_limit_exceeded") throw err;
      candidates = candidates.slice(1);
      need = { ...need, routes: candidates };
    }
  }
  let admitSeconds = (performance.now() - admitting) / 1000;
  try {
    // The prompt is counted before the worst case only where its count can change the outcome;
    // otherwise admission holds on its byte bound and the count runs beside the answer (in a
    // worker for a large prompt), in time for the usage: billed input stays min(reported, counted).
    const bound = BigInt(maximumPromptTokens(body.messages, body.tools));
    let admitted = admitOnBound(deps.leases, ticket, need, bound);
    let promptTokens: bigint | Promise<bigint>;
    if (admitted) {
      promptTokens = countPrompt().then(BigInt, (err: unknown) => {
        // A prompt the worker pool could not count in time is billed on its bound, which the
        // upstream's own report (min of the two) brings down to what it read.
        request.log.warn({ err }, "prompt not counted; billing on its byte bound");
        return bound;
      });
    } else {
      const counted = BigInt(await countPrompt());
      const worstCase = performance.now();
      admitted = await admitWorstCase(deps.leases, ticket, need, counted);
      admitSeconds += (performance.now() - worstCase) / 1000;
      promptTokens = counted;
    }
    ticket = admitted.ticket;
    const [route, ...fallbackRoutes] = admitted.routes as [Route, ...Route[]];
    deps.chatMetrics.admit.observe(admitSeconds);
    rateLimitHeaders(reply, ticket);
    const relayed: RelayRequest = {
      requestId: request.id,
      accountId: principal.accountId,
      keyId: principal.keyId,
      route,
      fallbackRoutes,
      body: bytes,
      stream: body.stream === true,
      includeUsage: body.stream_options?.include_usage === true,
      receivedAtMs: BigInt(receivedAt),
      choices: BigInt(choices),
      maxOutputTokens: ticket.maxOutputTokens,
      promptTokens,
      leaseId: ticket.lease.leaseId,
      worstCaseMicros: ticket.worstCaseMicros,
      worstCaseTokens: ticket.worstCaseTokens,
      subscriptionId: ticket.subscriptionId,
      // Only an open endpoint's plan room moves with the request: other requests need no hook.
      enterRoute:
        !subscriptionId && admitted.routes.some((r) => r.open)
          ? (next) => enterRoute(deps, ticket, relayed, next)
          : undefined,
      // So the answer's usage.cost is what settlement will post.
      includedTokens: ticket.includedTokens,
      subscriptionPricing: admitted.terms && {
        pricingModel: admitted.terms.pricingModel,
        inputPricePer1mMicros: admitted.terms.inputPricePer1mMicros,
        outputPricePer1mMicros: admitted.terms.outputPricePer1mMicros,
        overagePricePer1mMicros: admitted.terms.overagePricePer1mMicros,
      },
    };
    const clientGone = new AbortController();
    const onClose = () => clientGone.abort();
    reply.raw.once("close", onClose);
    const events = relayAnswer(deps.relay, relayed, {
      clientGone: clientGone.signal,
      // The edge's own end: its shutdown grace over, or cut off from billing too long.
      cut: answerCutoff(deps.shutdown, deps.isolation),
      clientConnected: () => !reply.raw.destroyed,
    });
    // The request's place in the lease goes back when the relay ends, however it ends.
    const held = ticket;
    const relayEnded = () => {
      // 'close' follows every finished response too: the relay is over by then, and an abort
      // would only make an AbortError (a DOMException with its stack) for nobody.
      reply.raw.off("close", onClose);
      deps.leases.release(held);
    };
    return { events: releasing(events, relayEnded), route };
  } catch (err) {
    deps.leases.release(ticket);
    throw err;
  }
}

/**
 * An account key's request moving to a route: an open endpoint's plan room moves with it (the
 * usage event then names that plan's subscription, which settles it and pays its hoster); a
 * platform route needs none, and the request's slot in the plan it leaves goes back.
 */
async function enterRoute(deps: RouteDeps, ticket: Ticket, relayed: RelayRequest, route: Route): Promise<void> {
  if (route.open) {
    const current = ticket.lease.budgets.get(ticket.subscriptionId)?.terms?.productId;
    if (current !== route.productId) await deps.leases.moveToPlan(ticket, route.productId);
  } else if (ticket.subscriptionId) {
    if (ticket.slot) ticket.slot.admitted -= 1n;
    ticket.slot = undefined;
    ticket.subscriptionId = "";
  }
  relayed.subscriptionId = ticket.subscriptionId;
}

/** The relay's events, then `release` once they end (finished, failed or abandoned). */
async function* releasing(
  events: AsyncGenerator<RelayEvent, void, undefined>,
  release: () => void,
): AsyncGenerator<RelayEvent, void, undefined> {
  try {
    yield* events;
  } finally {
    release();
  }
}
