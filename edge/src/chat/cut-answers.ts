import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import type { Counter } from "prom-client";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { ChatCompletionRequest } from "@mkt/proto/registry/v1/registry";
import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";
import { usageCompleted } from "@mkt/runtime/usage-event";
import type { RelayedOutput } from "./relayed-output.ts";

/** Tries of one publish, each waiting this long for JetStream's ack, with a pause between them. */
const TRIES = 3;
const ACK_TIMEOUT_MS = 2_000;
const PAUSE_MS = 500;

/**
 * Reports the usage of streamed answers cut by registry's failure (docs/decisions.md, "Answers
 * cut by registry's death"). Registry meters every answer and records it on every exit path it
 * lives through; when it dies mid-answer, the edge is the one process that knows what its client
 * received. It publishes a usage.completed on `usage.cut` (its only publish right), like the one
 * registry would have sent for a client that left: `success=false`, the prompt and the output
 * tokens relayed. Nats-Msg-Id is the request id, as registry's: when registry did live to record
 * the answer (only the connection between them broke), JetStream keeps the first of the two and
 * billing settles a request once whatever the message id.
 *
 * Nothing waits for it (the client already has its error event); `close` waits for those still
 * in flight. A report JetStream did not ack after TRIES is logged and counted: with registry dead
 * and NATS unreachable at once, that answer goes unbilled.
 */
export class CutAnswers {
  readonly #js: JetStreamClient;
  readonly #subject: string;
  readonly #log: Logger;
  readonly #inFlight = new Set<Promise<void>>();
  #count: Counter<"result"> | undefined;
  #countText: Promise<(text: string, limit: number) => number> | undefined;

  constructor(nc: NatsConnection, subject: string, log: Logger) {
    this.#js = jetstream(nc);
    this.#subject = subject;
    this.#log = log.child({ component: "cut-answers" });
  }

  /** Counts reports by result (`acked`, `lost`) in the edge's metrics. */
  observe(counter: Counter<"result">): void {
    this.#count = counter;
  }

  /** Reports an answer registry's failure cut after `relayed` reached its client; `errorCode` is what the client was told. */
  report(sent: ChatCompletionRequest, relayed: RelayedOutput, errorCode: string): void {
    if (relayed.empty) return; // nothing relayed, nothing to bill: an ordinary failed request
    const reported = this.#publish(sent, relayed, errorCode).finally(() => this.#inFlight.delete(reported));
    this.#inFlight.add(reported);
  }

  /** Waits for the reports still in flight (before the edge drains NATS). */
  async close(): Promise<void> {
    await Promise.all(this.#inFlight);
  }

  async #publish(sent: ChatCompletionRequest, relayed: RelayedOutput, errorCode: string): Promise<void> {
    const requestId = sent.requestId;
    try {
      // Loaded on first use: most edges never cut an answer (the main thread loads it anyway with
      // the first small prompt it counts).
      const countText = await (this.#countText ??= import("@mkt/runtime/tokens").then((t) => t.countTextTokens));
      const routes = [sent.route, ...sent.fallbackRoutes];
      const model = relayed.model();
      const route = routes.find((r) => r?.modelId === model) ?? sent.route;
      const choices = sent.choices > 1n ? sent.choices : 1n;
      const outputTokens = relayed.outputTokens(sent.maxOutputTokens * choices, countText);
      const event = usageCompleted(sent, {
        route,
        inputTokens: sent.promptTokens,
        outputTokens,
        errorCode,
        finishReason: "error",
      });
      const data = UsageCompleted.encode(event).finish();
      for (let attempt = 1; ; attempt++) {
        try {
          await this.#js.publish(this.#subject, data, { msgID: requestId, timeout: ACK_TIMEOUT_MS });
          this.#log.warn(
            { requestId, errorCode, outputTokens: Number(outputTokens) },
            "answer cut by registry's failure; its relayed usage reported",
          );
          this.#count?.inc({ result: "acked" });
          return;
        } catch (err) {
          if (attempt >= TRIES) throw err;
          await new Promise((resolve) => setTimeout(resolve, PAUSE_MS));
        }
      }
    } catch (err) {
      this.#log.error({ err, requestId }, "usage of an answer cut by registry's failure could not be reported");
      this.#count?.inc({ result: "lost" });
    }
  }
}
