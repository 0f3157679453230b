/**
 * Query-string schemas of the usage reports (spec "Limits"). Fastify validates them before the
 * handler runs, the validation plugin turns a failure into a 400 naming the parameter, and they
 * document the parameters at /docs.
 */
const days = {
  type: "integer",
  minimum: 1,
  maximum: 365,
  default: 30,
  description:
    "How many days back the report reaches (UTC; see docs/adr/0030-usage-report-windows-and-export.md for the exact window).",
} as const;

export const INTERVALS = ["hour", "day", "week", "month"] as const;

export const daysQuerySchema = {
  type: "object",
  properties: { days },
} as const;

export const tokensQuerySchema = {
  type: "object",
  properties: {
    days,
    interval: {
      type: "string",
      enum: INTERVALS,
      default: "day",
      description: "Bucket size of the series; weeks start on Monday.",
    },
  },
} as const;

export interface DaysQuery {
  days: number;
}

export interface TokensQuery extends DaysQuery {
  interval: (typeof INTERVALS)[number];
}
