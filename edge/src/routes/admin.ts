import type { FastifyInstance, onRequestAsyncHookHandler } from "fastify";
import { CreateInviteRequest, GetAccountRequest } from "@mkt/proto/accounts/v1/accounts";
import { AddCreditsRequest } from "@mkt/proto/billing/v1/billing";
import { microsToUsd, usdToMicros } from "@mkt/runtime/money";
import { adminDeadLetterRoutes } from "./admin-dead-letters.ts";
import type { RouteDeps } from "./route-deps.ts";
import { boolean, listOf, object, replies, string, usd } from "./response-schemas.ts";

interface TopUp {
  Params: { account_id: string };
  Body: { amount_usd: number };
  Headers: { "idempotency-key"?: string };
}

/** Operator endpoints, behind the admin token. */
export function adminRoutes(app: FastifyInstance, deps: RouteDeps, admin: onRequestAsyncHookHandler): void {
  adminDeadLetterRoutes(app, deps, admin);
  app.post<{ Body: { count?: number } | undefined }>(
    "/admin/invites",
    {
      onRequest: admin,
      schema: {
        summary: "Create single-use hoster invite codes (each shown once, in this response)",
        response: replies(
          201,
          listOf(object({ object: string("`invite`"), invite_code: string(), created_at: string() })),
        ),
        tags: ["admin"],
        security: [{ adminToken: [] }],
        body: {
          type: ["object", "null"],
          additionalProperties: false,
          properties: { count: { type: "integer", minimum: 1, maximum: 100, default: 1 } },
        },
      },
    },
    async (request, reply) => {
      const count = request.body?.count ?? 1;
      const invites = [];
      for (let i = 0; i < count; i++) {
        const invite = await deps.backends.accounts.createInvite(CreateInviteRequest.fromPartial({}));
        invites.push({ object: "invite", invite_code: invite.inviteCode, created_at: invite.createdAt });
      }
      return reply.code(201).send({ object: "list", data: invites });
    },
  );

  app.post<TopUp>(
    "/admin/accounts/:account_id/credits",
    {
      onRequest: admin,
      schema: {
        summary: "Top up an account's credit (a retry with the same Idempotency-Key credits once)",
        response: replies(
          200,
          object({
            object: string("`credit_top_up`"),
            account_id: string(),
            amount_usd: usd(),
            credit_balance_usd: usd(),
            replayed: boolean("A retry of a top-up already made: nothing was credited again"),
          }),
        ),
        tags: ["admin"],
        security: [{ adminToken: [] }],
        params: {
          type: "object",
          required: ["account_id"],
          properties: { account_id: { type: "string", maxLength: 64 } },
        },
        headers: {
          type: "object",
          properties: { "idempotency-key": { type: "string", minLength: 1, maxLength: 255 } },
        },
        body: {
          type: "object",
          required: ["amount_usd"],
          additionalProperties: false,
          properties: { amount_usd: { type: "number", exclusiveMinimum: 0, maximum: 1_000_000, example: 10 } },
        },
      },
    },
    async (request) => {
      const accountId = request.params.account_id;
      // Billing knows wallets, not accounts: a top-up must not open a wallet for a made-up id.
      await deps.backends.accounts.getAccount(GetAccountRequest.fromPartial({ accountId }));
      const amountMicros = usdToMicros(request.body.amount_usd);
      const result = await deps.backends.billing.addCredits(
        AddCreditsRequest.fromPartial({
          accountId,
          amountMicros,
          idempotencyKey: request.headers["idempotency-key"] ?? "",
        }),
      );
      request.log.info({ accountId, amountMicros: String(amountMicros), replayed: result.replayed }, "credit top-up");
      return {
        object: "credit_top_up",
        account_id: accountId,
        amount_usd: microsToUsd(amountMicros),
        credit_balance_usd: microsToUsd(result.creditBalanceMicros),
        replayed: result.replayed,
      };
    },
  );
}
