import type { FastifyInstance } from "fastify";
import { CreateAccountRequest } from "@mkt/proto/accounts/v1/accounts";
import { GetBalanceRequest } from "@mkt/proto/billing/v1/billing";
import { microsToUsd } from "@mkt/runtime/money";
import type { RouteDeps } from "./route-deps.ts";
import { noStore } from "../plugins/security-headers.ts";
import { nullableNumber, object, replies, string } from "./response-schemas.ts";

interface SignUpBody {
  email: string;
  password: string;
}

/** POST /v1/accounts: sign-up (no credential; attempts are limited per client IP by accounts). */
export function accountRoutes(app: FastifyInstance, deps: RouteDeps): void {
  app.post<{ Body: SignUpBody }>(
    "/v1/accounts",
    {
      onRequest: noStore,
      schema: {
        summary: "Create a customer account and its first API key (shown once)",
        response: replies(
          201,
          object({
            account_id: string(),
            email: string(),
            api_key: string("The account's first API key, shown only here"),
            credit_balance_usd: nullableNumber("The starting credit; null when the wallet opens on first use instead"),
          }),
        ),
        tags: ["accounts"],
        body: {
          type: "object",
          required: ["email", "password"],
          properties: {
            email: { type: "string", maxLength: 254, example: "ada@example.com" },
            password: { type: "string", maxLength: 256, example: "correct horse battery staple" },
          },
        },
      },
    },
    async (request, reply) => {
      const created = await deps.backends.accounts.createAccount(
        CreateAccountRequest.fromPartial({
          email: request.body.email,
          password: request.body.password,
          clientIp: request.ip,
        }),
      );
      const accountId = created.account!.accountId;
      // Opening the wallet grants the starting credit (exactly once). The account and its key
      // exist already, so a billing hiccup must not turn this into an error that loses the key.
      const balance = await deps.backends.billing
        .getBalance(GetBalanceRequest.fromPartial({ accountId }))
        .catch((err: unknown) => {
          request.log.warn({ err, accountId }, "wallet not opened at sign-up; it opens on first use");
          return undefined;
        });
      return reply.code(201).send({
        account_id: accountId,
        email: created.account!.email,
        api_key: created.apiKey,
        credit_balance_usd: balance ? microsToUsd(balance.creditBalanceMicros) : null,
      });
    },
  );
}
