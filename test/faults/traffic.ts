import { postChat } from "../e2e/billing-db.ts";

/** One answer a client saw while a dependency was failing. */
export interface Outcome {
  /** When the request was sent (ms since the epoch). */
  sentAt: number;
  /** When its answer had been read whole (or the connection failed). */
  doneAt: number;
  what: "chat" | "stream" | "usage" | "keys";
  /** HTTP status; 0 when the connection itself failed. */
  status: number;
  retryAfter: string | null;
  /** The OpenAI error code of a refusal, or of a stream's final error event. */
  errorCode?: string;
  /** A refusal's message (what a failure reports of it). */
  errorMessage?: string;
  /** A streamed answer that ended with its `[DONE]` line and no error event. */
  whole?: boolean;
  requestId: string | null;
}

/** One client of the traffic: its key, the model it calls and what it cycles through. */
export interface Client {
  apiKey: string;
  /** Default: the local model, demo-small. */
  model?: string;
  /** Default: chat, stream, usage, keys (a scoped key may not list keys). */
  kinds?: Outcome["what"][];
}

const chatBody = (model: string, text: string, stream: boolean) => ({
  model,
  max_tokens: 8,
  messages: [{ role: "user", content: text }],
  ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
});

async function once(url: string, client: Client, what: Outcome["what"], i: number): Promise<Outcome> {
  const sentAt = Date.now();
  const { apiKey, model = "demo-small" } = client;
  const auth = { authorization: `Bearer ${apiKey}` };
  try {
    const res =
      what === "chat" || what === "stream"
        ? await postChat(url, apiKey, chatBody(model, `request ${i}`, what === "stream"))
        : await fetch(`${url}/v1/${what}`, { headers: auth });
    const text = await res.text();
    const outcome: Outcome = {
      sentAt,
      doneAt: Date.now(),
      what,
      status: res.status,
      retryAfter: res.headers.get("retry-after"),
      requestId: res.headers.get("x-request-id"),
    };
    if (res.status !== 200) {
      const { error } = JSON.parse(text) as { error?: { code?: string; message?: string } };
      outcome.errorCode = error?.code;
      outcome.errorMessage = error?.message;
    } else if (what === "stream") {
      const errorLine = text.split("\n").find((line) => line.startsWith("data: {") && line.includes('"error":{'));
      if (errorLine) outcome.errorCode = (JSON.parse(errorLine.slice(6)) as { error: { code: string } }).error.code;
      outcome.whole = !errorLine && text.trimEnd().endsWith("data: [DONE]");
    }
    return outcome;
  } catch {
    return { sentAt, doneAt: Date.now(), what, status: 0, retryAfter: null, requestId: null };
  }
}

export interface Traffic {
  outcomes: Outcome[];
  /** When each streamed request now in flight was sent (Date.now()). */
  streamsInFlight(): number[];
  /** Stops sending and waits for the requests in flight. */
  stop(): Promise<Outcome[]>;
}

/**
 * A few clients in a loop, each cycling through a non-streamed and a streamed chat completion and
 * two reads (usage from billing, keys from accounts), with a short pause between requests so a
 * fault's effects are sampled every few tens of milliseconds without flooding a 2-core machine.
 */
export function startTraffic(url: string, clients: Array<string | Client>, pauseMs = 25): Traffic {
  const outcomes: Outcome[] = [];
  const streaming = new Set<{ sentAt: number }>();
  let running = true;
  const loops = clients.map(async (given, index) => {
    const client = typeof given === "string" ? { apiKey: given } : given;
    const kinds = client.kinds ?? ["chat", "stream", "usage", "keys"];
    for (let i = index; running; i++) {
      const what = kinds[i % kinds.length]!;
      const stream = { sentAt: Date.now() };
      if (what === "stream") streaming.add(stream);
      outcomes.push(await once(url, client, what, i));
      streaming.delete(stream);
      await new Promise((resolve) => setTimeout(resolve, pauseMs));
    }
  });
  return {
    outcomes,
    streamsInFlight: () => [...streaming].map((s) => s.sentAt),
    async stop() {
      running = false;
      await Promise.all(loops);
      return outcomes;
    },
  };
}

/** A summary for failure messages: counts by what, status and error code. */
export function tally(outcomes: Outcome[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const o of outcomes) {
    const key = `${o.what} ${o.status}${o.errorCode ? ` ${o.errorCode}` : ""}`;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}
