import type { ChatMessageLike } from "@mkt/runtime/tokens";
import type { ChatRequest, DemoTool } from "../chat-request.ts";

type Json = Record<string, unknown>;

/** A tool to call, and the arguments the user asked for (if they did). */
export interface ToolCall {
  tool: DemoTool;
  args?: string;
}

/**
 * Instructions the client adds around the conversation, not a turn of it: Claude Code sends a
 * system message after the user's, and an answer to the user must still see the user's request.
 */
const INSTRUCTION_ROLES = new Set(["system", "developer"]);

/**
 * The message the demo answers: the last one that is not an instruction. After a tool's result
 * this is the `tool` message, never the user's request before it, so a round trip ends instead of
 * calling the tool again.
 */
function lastTurn(messages: readonly ChatMessageLike[]): ChatMessageLike | undefined {
  return messages.findLast((m) => typeof m.role !== "string" || !INSTRUCTION_ROLES.has(m.role));
}

/** `call <tool> <json>` in the message the demo answers, when it is the user's and names an offered tool. */
export function askedCall(chat: ChatRequest): ToolCall | undefined {
  const last = lastTurn(chat.messages);
  if (last?.role !== "user") return undefined;
  const text = messageText(last.content);
  for (const match of text.matchAll(/\bcall\s+([\w.:-]+)/g)) {
    const tool = chat.tools.find((t) => t.name === match[1]);
    if (!tool) continue;
    const rest = text.slice(match.index + match[0].length);
    const open = rest.indexOf("{");
    const close = rest.lastIndexOf("}");
    if (open < 0 || close < open || rest.slice(0, open).trim() !== "") return { tool };
    const json = rest.slice(open, close + 1);
    try {
      const parsed: unknown = JSON.parse(json);
      return parsed && typeof parsed === "object" && !Array.isArray(parsed) ? { tool, args: json } : { tool };
    } catch {
      return { tool };
    }
  }
  return undefined;
}

function messageText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((part: unknown) =>
      part && typeof part === "object" && (part as Json).type === "text" ? String((part as Json).text ?? "") : "",
    )
    .join("\n");
}
