/**
 * The relay's cost per relayed chunk (edge/src/relay/chunk-accumulator.ts).
 *
 *   npm run bench:relay
 *
 * Times ChunkAccumulator.relayText over BENCH_CHUNKS (200,000) upstream chunks, in streams of 200
 * as the relay sees them (a role chunk, text deltas, a finishing chunk, a usage report), one
 * accumulator per stream: with plain text deltas read without JSON.parse (plain-delta.ts) and with
 * every chunk parsed by JSON.parse, for the chunks of hoster-server's demo, vLLM and llama.cpp's
 * server (every text delta plain) and of OpenAI's API asked for usage, as the relay asks, which
 * writes `"usage":null` into every chunk (none plain: what the fast path costs a stream it cannot
 * help). Each figure is the median of BENCH_ROUNDS (7) rounds, fast and slow alternating after a
 * warm-up; no services are started.
 */
import { ChunkAccumulator } from "../edge/src/relay/chunk-accumulator.ts";

const CHUNKS = Number(process.env.BENCH_CHUNKS ?? 200_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const PER_STREAM = 200;

const WORDS = (
  "the of and to in is that for it as was with be by on not he this are or his from at which but have an " +
  "they you were her she there been one all we their has would when if so no will more can said what out " +
  "model token stream answer server relay upstream price billing hoster request response café naïve 日本"
).split(" ");

type Shape = (delta: object, finish: string | null, usage?: object) => object;
const SHAPES: Record<string, Shape> = {
  // hoster-server's demo (demo-routes.ts)
  "demo hoster": (delta, finish, usage) => ({
    id: "chatcmpl-dEm0dEm0dEm0",
    object: "chat.completion.chunk",
    created: 1764000000,
    model: "demo-small",
    choices: usage ? [] : [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    ...(usage && { usage }),
  }),
  vLLM: (delta, finish, usage) => ({
    id: "chatcmpl-5f0c1b2e8a7d4c3b9e6f1a2b3c4d5e6f",
    object: "chat.completion.chunk",
    created: 1764000000,
    model: "Qwen/Qwen2.5-7B-Instruct",
    choices: usage ? [] : [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    ...(usage && { usage }),
  }),
  "llama.cpp server": (delta, finish, usage) => ({
    choices: usage ? [] : [{ finish_reason: finish, index: 0, delta }],
    created: 1764000000,
    id: "chatcmpl-Zq1xYw2vUt3s",
    model: "gpt-3.5-turbo",
    system_fingerprint: "b4589-5c0b8f3c",
    object: "chat.completion.chunk",
    ...(usage && { usage }),
  }),
  'OpenAI, "usage":null': (delta, finish, usage) => ({
    id: "chatcmpl-AbC123dEf456gHi789",
    object: "chat.completion.chunk",
    created: 1764000000,
    model: "gpt-4o-mini-2024-07-18",
    system_fingerprint: "fp_44709d6fcb",
    choices: usage ? [] : [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    usage: usage ?? null,
  }),
};

/** Streams of PER_STREAM chunk texts, CHUNKS in all, written as `shape`'s server writes them. */
function streams(shape: Shape): string[][] {
  let seed = 1;
  const word = () => {
    seed = (seed * 16807) % 2147483647; // Park–Miller: the same words on every run
    return WORDS[seed % WORDS.length]!;
  };
  const out: string[][] = [];
  for (let n = 0; n < CHUNKS; n += PER_STREAM) {
    const texts = [JSON.stringify(shape({ role: "assistant", content: "" }, null))];
    while (texts.length < PER_STREAM - 2) texts.push(JSON.stringify(shape({ content: ` ${word()}` }, null)));
    texts.push(JSON.stringify(shape({}, "stop")));
    texts.push(JSON.stringify(shape({}, null, { prompt_tokens: 20, completion_tokens: PER_STREAM - 3 })));
    out.push(texts);
  }
  return out;
}

/** Nanoseconds per chunk for one pass over every stream. */
function pass(all: string[][], fast: boolean): number {
  let chunks = 0;
  let bytes = 0;
  const started = process.hrtime.bigint();
  for (const texts of all) {
    const acc = new ChunkAccumulator("chatcmpl-bench-request", "bench-model", 1_000_000, { scanPlainDeltas: fast });
    for (const text of texts) bytes += acc.relayText(text)?.length ?? 0;
    chunks += texts.length;
  }
  const ns = Number(process.hrtime.bigint() - started);
  if (bytes === 0) throw new Error("nothing relayed");
  return ns / chunks;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

console.log(`ChunkAccumulator.relayText, ${CHUNKS.toLocaleString("en")} chunks, median of ${ROUNDS} rounds:`);
for (const [name, shape] of Object.entries(SHAPES)) {
  const all = streams(shape);
  pass(all, true); // warm-up
  pass(all, false);
  const fast: number[] = [];
  const slow: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    fast.push(pass(all, true));
    slow.push(pass(all, false));
  }
  const [f, s] = [median(fast), median(slow)];
  console.log(
    `  ${name.padEnd(20)} plain-delta scan ${f.toFixed(0).padStart(5)} ns/chunk, ` +
      `JSON.parse ${s.toFixed(0).padStart(5)} ns/chunk (${(s / f).toFixed(2)}×)`,
  );
}
