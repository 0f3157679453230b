import { postChat } from "./billing-db.ts";

/** What a client saw of one streamed chat answer. */
export interface Streamed {
  requestId: string;
  status: number;
  content: string;
  /** `[DONE]` arrived: the answer is whole. */
  done: boolean;
  /** The connection failed mid-stream. */
  broken: boolean;
  /** The code of the error event that ended the stream, if one did. */
  errorCode?: string;
}

/**
 * Starts one streamed chat request (`stream: true` is added to `body`); `started` resolves once
 * its first words arrived (or it ended without any), `finished` with what the client saw.
 */
export function streamAnswer(url: string, apiKey: string, body: Record<string, unknown>) {
  let markStarted!: () => void;
  const started = new Promise<void>((resolve) => (markStarted = resolve));
  const finished = (async (): Promise<Streamed> => {
    const res = await postChat(url, apiKey, { ...body, stream: true });
    const seen: Streamed = {
      requestId: res.headers.get("x-request-id") ?? "",
      status: res.status,
      content: "",
      done: false,
      broken: false,
    };
    if (res.status !== 200) {
      await res.text().catch(() => "");
      markStarted();
      return seen;
    }
    const decoder = new TextDecoder();
    let buffer = "";
    try {
      for await (const bytes of res.body!) {
        buffer += decoder.decode(bytes, { stream: true });
        let end: number;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, end).replace(/^data: /, "");
          buffer = buffer.slice(end + 2);
          if (event === "[DONE]") {
            seen.done = true;
            continue;
          }
          const chunk = JSON.parse(event) as {
            choices?: Array<{ delta?: { content?: string } }>;
            error?: { code?: string };
          };
          if (chunk.error) seen.errorCode = chunk.error.code ?? "";
          const words = chunk.choices?.[0]?.delta?.content;
          if (words) {
            seen.content += words;
            markStarted();
          }
        }
      }
    } catch {
      seen.broken = true;
    }
    markStarted();
    return seen;
  })();
  return { started, finished };
}
