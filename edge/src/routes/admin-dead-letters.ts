import type { FastifyInstance, onRequestAsyncHookHandler } from "fastify";
import type { UsageDeadLetter } from "@mkt/proto/events/v1/usage_dead_letter";
import type { RouteDeps } from "./route-deps.ts";
import { arrayOf, integer, listOf, object, replies, string } from "./response-schemas.ts";

/** The usage consumers that keep dead letters, each in its own table. */
const SERVICES = ["billing", "registry"] as const;
type DeadLetterService = (typeof SERVICES)[number];

interface ServiceQuery {
  Querystring: { service: DeadLetterService };
}

const serviceQuery = {
  type: "object",
  properties: {
    service: {
      type: "string",
      enum: SERVICES,
      default: "billing",
      description:
        "Whose letters: `billing` (events it could not settle: not charged until replayed) or `registry` " +
        "(events it could not write into its hosters' figures)",
    },
  },
} as const;

const letterSchema = object({
  object: string("`usage_dead_letter`"),
  id: string(),
  request_id: string("'' when the bytes did not decode far enough to name one"),
  subject: string("The JetStream subject it came on, or `grpc:RecordUsage`"),
  reason: string(),
  attempts: integer(),
  first_seen_at: string(),
  last_seen_at: string(),
  data_base64: string("The event's encoded bytes as they came"),
});

const letterJson = (letter: UsageDeadLetter) => ({
  object: "usage_dead_letter",
  id: letter.id,
  request_id: letter.requestId,
  subject: letter.subject,
  reason: letter.reason,
  attempts: letter.attempts,
  first_seen_at: letter.firstSeenAt,
  last_seen_at: letter.lastSeenAt,
  data_base64: Buffer.from(letter.data).toString("base64"),
});

/**
 * The operator's view of the usage dead letters (docs/settlement.md#dead-letters): the events a
 * consumer could not use and kept, and their replay once the cause is fixed. Billing's and
 * registry's are apart (`?service=`), as their tables are; billing's is the default.
 */
export function adminDeadLetterRoutes(app: FastifyInstance, deps: RouteDeps, admin: onRequestAsyncHookHandler): void {
  // Both services answer the same messages (ListUsageDeadLetters, ReplayUsageDeadLetters).
  const backend = (service: DeadLetterService) => deps.backends[service];

  app.get<ServiceQuery>(
    "/admin/usage/dead-letters",
    {
      onRequest: admin,
      schema: {
        summary: "Usage events a service could not use and kept, not replayed yet (oldest first, at most 1,000)",
        querystring: serviceQuery,
        response: replies(200, listOf(letterSchema)),
        tags: ["admin"],
        security: [{ adminToken: [] }],
      },
    },
    async (request) => {
      const { letters } = await backend(request.query.service).listUsageDeadLetters({});
      return { object: "list", data: letters.map(letterJson) };
    },
  );

  app.post<ServiceQuery & { Body: { ids?: string[] } | undefined }>(
    "/admin/usage/dead-letters/replay",
    {
      onRequest: admin,
      schema: {
        summary:
          "Use dead letters again once their cause is fixed (all of them without ids): billing settles them, " +
          "registry writes their figures; each letter counts once however often it is replayed",
        querystring: serviceQuery,
        response: replies(
          200,
          object({
            object: string("`usage_dead_letter_replay`"),
            replayed: integer("Letters whose events are now settled or written (or were already settled)"),
            failed: arrayOf(letterSchema, "Letters that still cannot be used, with their reasons now"),
          }),
        ),
        tags: ["admin"],
        security: [{ adminToken: [] }],
        body: {
          type: ["object", "null"],
          additionalProperties: false,
          properties: { ids: { type: "array", maxItems: 1000, items: { type: "string", maxLength: 64 } } },
        },
      },
    },
    async (request) => {
      const { service } = request.query;
      const result = await backend(service).replayUsageDeadLetters({ ids: request.body?.ids ?? [] });
      request.log.info(
        { service, replayed: result.replayed, failed: result.failed.length },
        "usage dead letters replayed",
      );
      return { object: "usage_dead_letter_replay", replayed: result.replayed, failed: result.failed.map(letterJson) };
    },
  );
}
