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
import { EndpointSteps } from "../routing/endpoint-steps.ts";
import { stickyKey } from "../routing/sticky-key.ts";
import type { Ticket } from "../leases/lease-admission.ts";
import { candidateRoutes } from "./candidate-routes.ts";
import type { ChatBody } from "./chat-body.ts";
import { admitOnBound, admitRequest, admitWorstCase, rateLimitHeaders, termsPricing } from "./lease-admit.ts";
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

  let conversation: { key: string | undefined } | undefined;
  // The request's endpoints, drawn once here: admission, the prompt's fit and the relay all step
  // through this one order (routing/endpoint-steps.ts).
  const subscriptionId = principal.scope?.subscriptionId ?? "";
  const endpoints = new EndpointSteps(
    await candidateRoutes(deps, principal.scope, modelChoices(body), {
      n: body.n ?? 1,
      provider: chat.provider,
      // Read from the chat body every API translates onto, once, and only for an open model.
      stickyKey: () => (conversation ??= { key: stickyKey(principal.accountId, body) }).key,
    }),
    { subscriptionId },
  );

  // The largest context among the models is the largest this prompt could be served with (a plan
  // only narrows it, at admission): past it, counting stops and the prompt is refused here.
  const contextLimit = Number(
    endpoints.routes.reduce((most, r) => (r.contextWindow > most ? r.contextWindow : most), 0n),
  );
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
  const needOn = (routes: readonly Route[]) => ({
    accountId: principal.accountId,
    tier: principal.tier,
    subscriptionId,
    keyId: principal.keyId,
    routes,
    requested: BigInt(requested),
    choices: BigInt(choices < 1 ? 1 : choices),
  });
  const admitting = performance.now();
  // An open endpoint whose plan refuses the account (the hoster paused it, the plan's limits are
  // reached) is passed over for the next one; the last one's refusal is the answer.
  let ticket: Ticket = await endpoints.admitOnFirst((routes) => admitRequest(deps.leases, needOn(routes)));
  const need = needOn(endpoints.routes);
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
    endpoints.keep(admitted.routes);
    const [route, ...fallbackRoutes] = endpoints.routes as [Route, ...Route[]];
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
      // So the answer's usage.cost is what settlement will post.
      includedTokens: ticket.includedTokens,
      subscriptionPricing: admitted.terms && termsPricing(admitted.terms),
    };
    // Only an open endpoint's plan room moves with the request: other requests need no hook.
    const enterHook = endpoints.enterHook(deps.leases, ticket, relayed);
    // A call whose client left has its slot back already (below): it takes no plan's room again.
    const call = ticket;
    relayed.enterRoute = enterHook && (async (route) => (call.released ? undefined : enterHook(route)));
    // The call's slot (and its place in the lease) goes back as soon as nothing more is asked of
    // the upstream, before the client can act on it: when the relay's last event is made (a
    // client that sends its next request on reading it must find its slot free, or it is refused
    // for a limit it never reached), or when the client leaves (the upstream call is aborted);
    // at the latest when the relay ends. What the relay does after that is make the usage event
    // durable, which may wait on NATS or billing: no reason to hold a slot.
    const endCall = () => deps.leases.release(call);
    const clientGone = new AbortController();
    const onClose = () => {
      clientGone.abort();
      endCall();
    };
    reply.raw.once("close", onClose);
    const events = relayAnswer(deps.relay, relayed, {
      clientGone: clientGone.signal,
      // The edge's own end: its shutdown grace over, or cut off from billing too long.
      cut: answerCutoff(deps.shutdown, deps.isolation),
      clientConnected: () => !reply.raw.destroyed,
    });
    const relayEnded = () => {
      // 'close' follows every finished response too: the relay is over by then, and an abort
      // would only make an AbortError (a DOMException with its stack) for nobody.
      reply.raw.off("close", onClose);
      endCall();
    };
    return { events: releasing(events, endCall, relayEnded), route };
  } catch (err) {
    deps.leases.release(ticket);
    throw err;
  }
}

/**
 * The relay's events: `endCall` before the last one (a completion, the stream's end or its final
 * error) is handed on, `ended` once they end (finished, failed or abandoned: the relay's own
 * `finally` runs first, as it would under `yield*`).
 */
async function* releasing(
  events: AsyncGenerator<RelayEvent, void, undefined>,
  endCall: () => void,
  ended: () => void,
): AsyncGenerator<RelayEvent, void, undefined> {
  try {
    for (;;) {
      const step = await events.next();
      if (step.done) return;
      if (!("chunks" in step.value)) endCall();
      yield step.value;
    }
  } finally {
    try {
      await events.return();
    } finally {
      ended();
    }
  }
}
