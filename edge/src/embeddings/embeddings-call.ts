import type { FastifyReply, FastifyRequest } from "fastify";
import { worstCaseCharge } from "@mkt/runtime/request-cost";
import { principalOf } from "../plugins/api-key-auth.ts";
import { rawJsonBody } from "../plugins/json-body.ts";
import { relayEmbeddings } from "../relay/relay-embeddings.ts";
import type { RelayRequest } from "../relay/relay-request.ts";
import type { RouteDeps } from "../routes/route-deps.ts";
import { candidateRoutes } from "../chat/candidate-routes.ts";
import { embeddingsWorstCase, rateLimitHeaders, termsPricing } from "../chat/lease-admit.ts";
import { countEmbeddingInputs, embeddingInputs, type EmbeddingsBody } from "./embeddings-body.ts";

/**
 * One embeddings request, on the chat path's parts: the key authenticated by the route's
 * onRequest, the model resolved from the routing table (an embedding model: a chat model is not
 * found for it; a scoped key finds its hoster's), the input counted by the gateway's tokenizer,
 * admission on the account's lease (one request, a worst case of the input tokens at the input
 * price, or a scoped key's plan's pricing of input tokens: there is no output), then the relay to
 * the model's servers (relay/relay-embeddings.ts), which publishes the usage event. Returns the
 * answer's JSON text, or undefined when the client left.
 */
export async function embed(
  deps: RouteDeps,
  request: FastifyRequest<{ Body: EmbeddingsBody }>,
  reply: FastifyReply,
): Promise<string | undefined> {
  const receivedAt = Date.now();
  const principal = principalOf(request);
  const body = request.body;
  const subscriptionId = principal.scope?.subscriptionId ?? "";
  const inputs = embeddingInputs(body.input);
  const [route] = await candidateRoutes(deps, principal.scope, [{ name: body.model, param: "model" }], {
    kind: "embedding",
  });
  const inputTokens = await countEmbeddingInputs(inputs, Number(route!.contextWindow));
  const prices = [{ inputPricePer1m: route!.inputPricePer1mMicros, outputPricePer1m: route!.outputPricePer1mMicros }];
  let ticket = await deps.leases.admit({
    accountId: principal.accountId,
    tier: principal.tier,
    subscriptionId,
    keyId: principal.keyId,
    // Known in full before admission on an account key: a cold account's one GrantLease covers it
    // (a subscription's price is its plan's, known once its budget is open).
    atLeast: {
      credit: subscriptionId ? 0n : worstCaseCharge({ inputTokens, outputTokens: 0n }, prices),
      tokens: inputTokens,
    },
  });
  try {
    const { worstCase, terms } = embeddingsWorstCase(ticket, [route!], subscriptionId, inputTokens);
    ticket = await deps.leases.takeWorstCase(ticket, worstCase);
    rateLimitHeaders(reply, ticket);
    const relayed: RelayRequest = {
      requestId: request.id,
      accountId: principal.accountId,
      keyId: principal.keyId,
      route: route!,
      fallbackRoutes: [],
      body: rawJsonBody(request) ?? Buffer.from(JSON.stringify(body)),
      stream: false,
      includeUsage: false,
      maxOutputTokens: 0n,
      promptTokens: inputTokens,
      receivedAtMs: BigInt(receivedAt),
      choices: 1n,
      leaseId: ticket.lease.leaseId,
      worstCaseMicros: ticket.worstCaseMicros,
      worstCaseTokens: ticket.worstCaseTokens,
      subscriptionId: ticket.subscriptionId,
      includedTokens: ticket.includedTokens,
      subscriptionPricing: terms && termsPricing(terms),
    };
    const clientGone = new AbortController();
    const onClose = () => clientGone.abort();
    reply.raw.once("close", onClose);
    try {
      return await relayEmbeddings(
        deps.relay,
        relayed,
        { inputs: inputs.length, encodingFormat: body.encoding_format === "base64" ? "base64" : "float" },
        { clientGone: clientGone.signal, clientConnected: () => !reply.raw.destroyed },
      );
    } finally {
      reply.raw.off("close", onClose);
    }
  } finally {
    deps.leases.release(ticket);
  }
}
