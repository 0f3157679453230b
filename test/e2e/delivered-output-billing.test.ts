import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import {
  ANSWER,
  startAdversarialUpstream,
  type AdversarialUpstream,
} from "../../services/registry/test/fixtures/adversarial-upstream.ts";
import { openBillingDb, postChat, type BillingDb } from "./billing-db.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Output that is not `content` (a legacy function_call, tool_calls, an audio transcript) reaches
// the caller and is billed by the registry's own count: these upstreams send no usage report, so
// before this was counted such an answer cost nothing.

const MODES = ["function-call", "tool-calls", "audio-transcript", "message-audio"] as const;

let upstream: AdversarialUpstream;
let system: RunningSystem;
let db: BillingDb;

beforeAll(async () => {
  upstream = await startAdversarialUpstream();
  system = await startSystem({
    registry: {
      LOCAL_MODEL_URL: upstream.url,
      LOCAL_MODEL_TOKEN: upstream.token,
      LOCAL_MODELS: JSON.stringify(
        MODES.map((mode) => ({
          model_id: mode,
          context_window: 8192,
          input_price_per_1m_usd: "0.50",
          output_price_per_1m_usd: "1.50",
          upstream_model: mode,
        })),
      ),
    },
  });
  db = await openBillingDb(system.databaseUrl);
});
afterAll(async () => {
  await db?.close();
  await system?.close();
  await upstream?.close();
});

async function settledRecord(requestId: string) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const [record] = await db.query<{ output_tokens: string; cost_micros: string }>(
      `select output_tokens::text, cost_micros::text from usage_records where request_id = $1`,
      [requestId],
    );
    if (record) return { outputTokens: BigInt(record.output_tokens), costMicros: BigInt(record.cost_micros) };
    if (Date.now() > deadline) throw new Error(`request ${requestId} never settled`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const EXPECTED_OUTPUT: Record<(typeof MODES)[number], string> = {
  "function-call": 'get_weather{"city":"Paris"}',
  "tool-calls": 'get_weather{"city":"Paris"}',
  "audio-transcript": ANSWER.join(""),
  "message-audio": ANSWER.join(""),
};

describe("every delivered delta is billed", () => {
  for (const stream of [false, true]) {
    it.each(MODES)(`%s (stream: ${stream}) bills its output tokens`, async (mode) => {
      const { apiKey } = await signUp(system.url);
      const res = await postChat(system.url, apiKey, {
        model: mode,
        messages: [{ role: "user", content: "What is the weather in Paris?" }],
        max_tokens: 100,
        stream,
      });
      expect(res.status).toBe(200);
      const text = await res.text();
      if (!stream && mode === "function-call") {
        const message = (JSON.parse(text) as { choices: Array<{ message: Record<string, unknown> }> }).choices[0]!
          .message;
        expect(message.function_call).toEqual({ name: "get_weather", arguments: '{"city":"Paris"}' });
      }
      const record = await settledRecord(res.headers.get("x-request-id")!);
      expect(record.outputTokens).toBe(BigInt(countTextTokens(EXPECTED_OUTPUT[mode])));
      expect(record.outputTokens).toBeGreaterThan(0n);
      expect(record.costMicros).toBeGreaterThan(0n);
    });
  }
});
