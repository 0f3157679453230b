import type { FastifyInstance } from "fastify";
import { ExportUsageRequest } from "@mkt/proto/billing/v1/billing";
import { usageOwnerOf } from "../plugins/api-key-auth.ts";
import { EXPORT_COLUMNS, openUsageExport, sendUsageCsv } from "../usage/export-csv.ts";
import { daysQuerySchema, type DaysQuery } from "../usage/usage-query.ts";
import type { RouteDeps } from "./route-deps.ts";
import { errorResponses } from "./response-schemas.ts";

/** GET /v1/usage/export: every usage record of the window as a streamed CSV file. */
export function usageExportRoutes(app: FastifyInstance, deps: RouteDeps): void {
  app.get(
    "/v1/usage/export",
    {
      onRequest: deps.auth({ allowScoped: true, acceptSession: true }),
      schema: {
        summary: "Usage records as CSV (failed requests included), oldest first",
        description: `Columns: ${EXPORT_COLUMNS.join(", ")}. Timestamps are ISO 8601 UTC; cost_usd has six decimals.`,
        tags: ["usage"],
        security: [{ apiKey: [] }],
        querystring: daysQuerySchema,
        produces: ["text/csv"],
        response: {
          200: {
            description: "The records as CSV, streamed",
            content: { "text/csv": { schema: { type: "string" } } },
          },
          ...errorResponses,
        },
      },
    },
    async (request, reply) => {
      const { days } = request.query as DaysQuery;
      // No deadline: a year of records takes a while; the client leaving cancels the call instead.
      const call = openUsageExport(
        deps.backends.billingStream,
        ExportUsageRequest.fromPartial({ ...usageOwnerOf(request), days }),
      );
      return sendUsageCsv(call, reply, `usage-${days}d.csv`);
    },
  );
}
