import { useRef, useState } from "react";
import { ErrorNote, Field } from "../components/ui.tsx";
import { call } from "../lib/api.ts";
import { answerUsageLine } from "../lib/answer-usage.ts";
import { readChatStream, type ChatResult } from "../lib/chat-stream.ts";
import { sessionKey } from "../lib/session-key.ts";
import { useApi } from "../lib/use-api.ts";
import { text, useSubmit } from "../lib/use-submit.ts";

interface Model {
  id: string;
  name: string;
  provider: string;
  /** `chat` or `embedding`: the playground chats, so it offers chat models only. */
  kind?: string;
}

/**
 * Streams a chat completion from POST /v1/chat/completions, as any client does, with the
 * session's short-lived key, or with a subscription's scoped key the person pastes (kept in this
 * page's memory only), and shows the answer's tokens and cost from its `usage` (the stream's
 * `include_usage` chunk; the portal never prices an answer itself). An answer that started and
 * was cut short says so and points at the Usage page; a request refused before it started was
 * not charged, so it shows its error only.
 */
export function PlaygroundPage() {
  const models = useApi<{ data: Model[] }>("/v1/models");
  const [answer, setAnswer] = useState("");
  /** How the last answer ended: undefined until one has started streaming. */
  const [ended, setEnded] = useState<{ usage: ChatResult["usage"] }>();
  const scopedKey = useRef("");
  const { busy, error, onSubmit } = useSubmit(async (form) => {
    setAnswer("");
    setEnded(undefined);
    const pasted = scopedKey.current.trim();
    const response = await call("/v1/chat/completions", {
      method: "POST",
      apiKey: pasted || (await sessionKey()),
      headers: { accept: "text/event-stream" },
      body: {
        model: text(form, "model") || "auto",
        messages: [{ role: "user", content: String(form.get("prompt")) }],
        stream: true,
        stream_options: { include_usage: true },
      },
    });
    try {
      const result = await readChatStream(response.body!, (piece) => setAnswer((so) => so + piece));
      setEnded({ usage: result.usage });
    } catch (err) {
      setEnded({ usage: undefined });
      throw err;
    }
  });
  return (
    <form className="card" onSubmit={onSubmit}>
      <div className="grid-2">
        <div className="field">
          <label htmlFor="model">Model</label>
          <select id="model" name="model" defaultValue="auto">
            <option value="auto">auto (the default model)</option>
            {(models.data?.data ?? [])
              .filter((m) => m.kind !== "embedding")
              .map((m) => (
                <option key={m.id} value={m.id}>
                  {m.name || m.id} ({m.provider})
                </option>
              ))}
          </select>
        </div>
        <Field
          label="Subscription key (optional)"
          type="password"
          autoComplete="off"
          hint="To try a subscription, paste its key; it stays in this page only."
          onChange={(e) => (scopedKey.current = e.target.value)}
        />
      </div>
      <div className="field">
        <label htmlFor="prompt">Message</label>
        <textarea id="prompt" name="prompt" rows={4} required defaultValue="Say hello in five words." />
      </div>
      <button type="submit" disabled={busy}>
        {busy ? "Answering…" : "Send"}
      </button>
      <ErrorNote message={error ?? models.error} />
      <section aria-live="polite" aria-label="Answer" className="answer" data-testid="answer">
        {answer || <span className="muted">The answer streams here.</span>}
      </section>
      {ended && <p data-testid="answer-usage">{answerUsageLine(ended.usage)}</p>}
    </form>
  );
}
