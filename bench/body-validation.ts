/**
 * What the edge checks of a request body before its handler acts, per request.
 *
 *   npm run bench:bodies
 *
 * Each body is checked BENCH_CHECKS (100,000) times by the validator Fastify compiles for its
 * route (edge/src/plugins/validation.ts, from the route's schema) and then read by
 * providerPreferences, as the handlers read `provider`. The bodies are the coding agents' own:
 * Codex's recorded turn (edge/test/fixtures/codex-turn-request.json) on /v1/responses, the chat
 * body the edge makes of it on /v1/chat/completions (what a chat client sends with tools), the
 * same with a `provider` object, and Claude Code's recorded turn (test/e2e/fixtures) on
 * /v1/messages. It prints the median and the fastest of BENCH_ROUNDS (7) rounds after a warm-up:
 * on a shared machine the fastest round is the steadier figure. No services are started.
 */
import { readFileSync } from "node:fs";
import { chatBodySchema } from "../edge/src/chat/chat-body.ts";
import { messagesBodySchema } from "../edge/src/messages/messages-body.ts";
import { compileBodyValidator } from "../edge/src/plugins/validation.ts";
import { chatBodyFromResponses } from "../edge/src/responses/request-translation.ts";
import { responsesBodySchema } from "../edge/src/responses/responses-body.ts";
import { providerPreferences, type ProviderField } from "../edge/src/routing/provider-preferences.ts";
import { claudeCodeTurn } from "../test/e2e/fixtures/claude-code-request.ts";

const CHECKS = Number(process.env.BENCH_CHECKS ?? 100_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);

// Parsed from text, as a request's body is: no object shared with the fixture modules.
const parsed = <T>(value: unknown): T => JSON.parse(JSON.stringify(value)) as T;
const codexTurn = parsed<Record<string, unknown>>(
  JSON.parse(readFileSync(new URL("../edge/test/fixtures/codex-turn-request.json", import.meta.url), "utf8")),
);
const chatBody = parsed<Record<string, unknown>>(chatBodyFromResponses(parsed(codexTurn)));
const provider = { only: ["acme", "globex"], sort: "price", max_price: { prompt: 2, completion: 8 } };

const cases: Array<{ name: string; schema: object; body: Record<string, unknown> }> = [
  { name: "chat, Codex's turn as chat", schema: chatBodySchema, body: chatBody },
  { name: "chat, same with provider", schema: chatBodySchema, body: { ...chatBody, provider } },
  { name: "responses, Codex's turn", schema: responsesBodySchema, body: codexTurn },
  { name: "messages, Claude Code's turn", schema: messagesBodySchema, body: parsed(claudeCodeTurn) },
];

function round(check: (body: unknown) => boolean, body: Record<string, unknown>): number {
  const started = process.hrtime.bigint();
  for (let i = 0; i < CHECKS; i++) {
    if (!check(body)) throw new Error("the benchmark's body was refused");
    providerPreferences(body.provider as ProviderField | undefined);
  }
  return Number(process.hrtime.bigint() - started) / CHECKS;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

console.log(`${CHECKS.toLocaleString("en")} checks per round, ${ROUNDS} rounds: ns per body, median and fastest`);
for (const { name, schema, body } of cases) {
  const check = compileBodyValidator(schema) as (body: unknown) => boolean;
  round(check, body);
  const times = Array.from({ length: ROUNDS }, () => round(check, body));
  const bytes = JSON.stringify(body).length.toLocaleString("en");
  const ns = (value: number) => `${value.toFixed(0).padStart(6)} ns`;
  console.log(`${name.padEnd(30)} ${`${bytes} B`.padStart(9)}  ${ns(median(times))}  ${ns(Math.min(...times))}`);
}
