/**
 * What one hop between two processes costs on this machine: a grpc-js unary call to an echo
 * server in another process, back to back (both processes stay awake) and after an idle gap
 * (both have gone to sleep, as every process of a request at one connection has).
 *
 *   npm run bench:hop
 *   BENCH_HOP_CALLS=2000 BENCH_HOP_GAP_MS=5 npm run bench:hop
 *
 * The gateway benchmark's first scenario sends one request at a time, so each process on the path
 * sleeps between its turns and each turn starts with a wake-up. This prints the price of one such
 * round trip, the unit in which our added latency is counted (bench/README.md, "Latency at one
 * connection").
 */
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import {
  credentials,
  makeGenericClientConstructor,
  Metadata,
  Server,
  ServerCredentials,
  type CallOptions,
  type handleUnaryCall,
  type ServiceDefinition,
  type ServiceError,
} from "@grpc/grpc-js";
import { summarize } from "./gateway/stats.ts";

const CALLS = Number(process.env.BENCH_HOP_CALLS ?? 1000);
const GAP_MS = Number(process.env.BENCH_HOP_GAP_MS ?? 5);

const identity = (bytes: Buffer) => bytes;
const echo: ServiceDefinition = {
  echo: {
    path: "/bench.Hop/Echo",
    requestStream: false,
    responseStream: false,
    requestSerialize: identity,
    requestDeserialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
  },
};

if (process.argv[2] === "server") {
  const server = new Server();
  const handler: handleUnaryCall<Buffer, Buffer> = (call, done) => done(null, call.request);
  server.addService(echo, { echo: handler });
  server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, port) => {
    if (err) throw err;
    process.send!(port);
  });
} else {
  const child = fork(fileURLToPath(import.meta.url), ["server"]);
  const port = await new Promise<number>((resolve) => child.once("message", (m) => resolve(m as number)));
  const Client = makeGenericClientConstructor(echo, "Hop");
  const client = new Client(`127.0.0.1:${port}`, credentials.createInsecure()) as unknown as {
    echo(request: Buffer, metadata: Metadata, options: CallOptions, done: (err: ServiceError | null) => void): void;
    close(): void;
  };
  const payload = Buffer.alloc(200); // about a GrantLeaseRequest
  const call = () =>
    new Promise<void>((resolve, reject) =>
      client.echo(payload, new Metadata(), { deadline: Date.now() + 10_000 }, (err) => (err ? reject(err) : resolve())),
    );
  const measure = async (gapMs: number) => {
    const times: number[] = [];
    for (let i = 0; i < CALLS; i++) {
      if (gapMs > 0) await new Promise((resolve) => setTimeout(resolve, gapMs));
      const started = performance.now();
      await call();
      times.push(performance.now() - started);
    }
    return summarize(times);
  };
  await measure(0); // warm-up: connection, JIT
  const busy = await measure(0);
  const idle = await measure(GAP_MS);
  const row = (label: string, s: ReturnType<typeof summarize>) =>
    `${label.padEnd(32)} p50 ${s.p50.toFixed(3)}  p99 ${s.p99.toFixed(3)}  mean ${s.mean.toFixed(3)} ms`;
  console.log(`grpc-js unary round trip between two processes, ${CALLS} calls each:`);
  console.log(row("back to back", busy));
  console.log(row(`after ${GAP_MS} ms idle`, idle));
  console.log(`idle − back to back (mean): ${(idle.mean - busy.mean).toFixed(3)} ms of wake-ups per round trip`);
  client.close();
  child.kill();
}
