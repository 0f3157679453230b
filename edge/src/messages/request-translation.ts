import type { ChatBody, ChatMessage, ChatTool } from "../chat/chat-body.ts";
import { badField as bad, isObject, requiredString, type Json } from "../translation/chat-json.ts";
import type { AnthropicMessage, ContentBlock, CountTokensBody, MessagesBody } from "./messages-body.ts";

/**
 * The chat-completions body equivalent to an Anthropic Messages API request: the answer then takes
 * the one chat path (admission, relay, metering) and is translated back (message-object.ts,
 * stream-translation.ts). `system` becomes a system message, and so does a `system` message
 * anywhere in `messages`, at its place; text and image blocks chat parts; `tool_use` blocks the
 * assistant's tool calls and `tool_result` blocks tool messages; client tools function tools;
 * `thinking` and `output_config.effort` the chat `reasoning_effort`. `cache_control`,
 * `context_management`, `metadata` and `top_k` are accepted and have no effect here; what cannot
 * be translated (server tools, files by id) is a 400 naming it. docs/messages-api.md lists every
 * field.
 *
 * `max_tokens` passes as it is: admission lowers one above what the model or plan serves, or
 * above the room the prompt leaves, as it does on every API (agents ask for 64,000).
 */
export function chatBodyFromMessages(body: MessagesBody): ChatBody {
  // Both run on Anthropic's side: answering without them would quietly answer another request.
  if (Array.isArray(body.mcp_servers) && body.mcp_servers.length > 0) {
    throw bad(
      "mcp_servers",
      "MCP servers run by the API (mcp_servers) are not supported: connect them to your client.",
    );
  }
  if (body.container != null) throw bad("container", "Containers (code execution) are not supported.");
  const chat = chatPrompt(body);
  const set = (field: string, value: unknown) => {
    if (value !== undefined && value !== null) chat[field] = value;
  };
  if (body.stream === true) {
    chat.stream = true;
    // The usage chunk ends the chat stream; message_delta carries it.
    chat.stream_options = { include_usage: true };
  }
  set("max_tokens", body.max_tokens);
  set("temperature", body.temperature);
  set("top_p", body.top_p);
  set("reasoning_effort", reasoningEffort(body));
  if (body.stop_sequences && body.stop_sequences.length > 0) chat.stop = body.stop_sequences;
  return chat;
}

/** The prompt alone (messages, system, tools and tool_choice): what count_tokens counts. */
export function chatPrompt(body: CountTokensBody): ChatBody {
  const messages: ChatMessage[] = [];
  const system = systemText(body.system);
  if (system !== "") messages.push({ role: "system", content: system });
  body.messages.forEach((message, i) => addMessage(messages, message, `messages[${i}]`));
  const chat: ChatBody = { model: body.model, messages };
  const tools = (body.tools ?? []).map((tool, i) => chatTool(tool, `tools[${i}]`));
  const choice = body.tool_choice;
  if (tools.length > 0) {
    // Chat servers refuse tool_choice and parallel_tool_calls without tools.
    chat.tools = tools;
    if (choice) {
      chat.tool_choice = chatToolChoice(choice);
      if (choice.disable_parallel_tool_use === true) chat.parallel_tool_calls = false;
    }
  } else if (choice && (choice.type === "any" || choice.type === "tool")) {
    throw bad("tool_choice", "tool_choice asks for a tool call, but tools offers none.");
  }
  return chat;
}

/**
 * Anthropic's efforts as the `reasoning_effort` OpenAI-compatible servers take (vLLM takes low,
 * medium and high): the ones above high ask for the most there is.
 */
const REASONING_EFFORTS: Readonly<Record<string, string>> = {
  low: "low",
  medium: "medium",
  high: "high",
  xhigh: "high",
  max: "high",
};

/**
 * The chat `reasoning_effort` of a Messages request: its `output_config.effort`, or OpenAI's
 * default effort when it turns thinking on (`enabled`, or `adaptive`, where the model decides how
 * much) without one. Thinking turned off asks for none; an effort this table does not know yet is
 * left out, not refused.
 */
function reasoningEffort(body: MessagesBody): string | undefined {
  const thinking = isObject(body.thinking) ? body.thinking.type : undefined;
  if (thinking === "disabled") return undefined;
  const effort = isObject(body.output_config) ? body.output_config.effort : undefined;
  if (typeof effort === "string" && Object.hasOwn(REASONING_EFFORTS, effort)) return REASONING_EFFORTS[effort];
  return thinking === "enabled" || thinking === "adaptive" ? "medium" : undefined;
}

function systemText(system: MessagesBody["system"], param = "system"): string {
  if (system === undefined) return "";
  if (typeof system === "string") return system;
  return system
    .map((block, i) => {
      if (block.type !== "text") throw bad(`${param}[${i}].type`, `${param} blocks must be text blocks.`);
      return requiredString(block, "text", `${param}[${i}]`);
    })
    .join("\n\n");
}

/**
 * Appends the chat messages of one Anthropic message. A system message stays a system message
 * where it stands (chat allows one anywhere). A user message's `tool_result` blocks
 * become tool messages, which chat requires right after the assistant's calls, so they come
 * before the message's other blocks.
 */
function addMessage(messages: ChatMessage[], message: AnthropicMessage, param: string): void {
  if (message.role === "system") {
    messages.push({ role: "system", content: systemText(message.content, `${param}.content`) });
    return;
  }
  const blocks: ContentBlock[] =
    typeof message.content === "string" ? [{ type: "text", text: message.content }] : message.content;
  if (message.role === "assistant") {
    messages.push(assistantMessage(blocks, param));
    return;
  }
  const parts: Json[] = [];
  blocks.forEach((block, i) => {
    const where = `${param}.content[${i}]`;
    if (block.type === "tool_result") messages.push(...toolResult(block, where));
    else parts.push(userPart(block, where));
  });
  if (parts.length > 0) messages.push({ role: "user", content: parts });
}

function assistantMessage(blocks: ContentBlock[], param: string): ChatMessage {
  let text = "";
  const calls: Json[] = [];
  blocks.forEach((block, i) => {
    const where = `${param}.content[${i}]`;
    switch (block.type) {
      case "text":
        text += requiredString(block, "text", where);
        return;
      case "tool_use":
        calls.push({
          id: requiredString(block, "id", where),
          type: "function",
          function: { name: requiredString(block, "name", where), arguments: JSON.stringify(block.input ?? {}) },
        });
        return;
      // Earlier thinking, sent back as Anthropic asks clients to: the model server has none to resume.
      case "thinking":
      case "redacted_thinking":
        return;
      default:
        throw bad(
          `${where}.type`,
          `Assistant content blocks of type ${JSON.stringify(block.type)} are not supported: only text, tool_use and thinking.`,
        );
    }
  });
  if (calls.length === 0) return { role: "assistant", content: text };
  return { role: "assistant", content: text === "" ? null : text, tool_calls: calls };
}

function userPart(block: ContentBlock, param: string): Json {
  switch (block.type) {
    case "text":
      return { type: "text", text: requiredString(block, "text", param) };
    case "image":
      return { type: "image_url", image_url: { url: imageUrl(block, param) } };
    case "document":
      return documentPart(block, param);
    default:
      throw bad(
        `${param}.type`,
        `User content blocks of type ${JSON.stringify(block.type)} are not supported: only text, image, document and tool_result.`,
      );
  }
}

function imageUrl(block: ContentBlock, param: string): string {
  const source = isObject(block.source) ? block.source : {};
  if (source.type === "base64") {
    const mediaType = requiredString(source, "media_type", `${param}.source`);
    return `data:${mediaType};base64,${requiredString(source, "data", `${param}.source`)}`;
  }
  if (source.type === "url") return requiredString(source, "url", `${param}.source`);
  throw bad(`${param}.source.type`, "Images must be sent as base64 or url sources; files by id are not supported.");
}

function documentPart(block: ContentBlock, param: string): Json {
  const source = isObject(block.source) ? block.source : {};
  if (source.type === "text") return { type: "text", text: requiredString(source, "data", `${param}.source`) };
  if (source.type === "base64") {
    const mediaType = requiredString(source, "media_type", `${param}.source`);
    const data = `data:${mediaType};base64,${requiredString(source, "data", `${param}.source`)}`;
    const title = typeof block.title === "string" ? { filename: block.title } : {};
    return { type: "file", file: { file_data: data, ...title } };
  }
  throw bad(`${param}.source.type`, "Documents must be sent as base64 or text sources; files by id are not supported.");
}

/**
 * A tool_result block: its text as the tool message; images it holds follow in a user message,
 * since chat's tool messages carry text only. An error result says so, as the model must know.
 */
function toolResult(block: ContentBlock, param: string): ChatMessage[] {
  const toolCallId = requiredString(block, "tool_use_id", param);
  const content = block.content ?? "";
  const images: Json[] = [];
  let text: string;
  if (typeof content === "string") text = content;
  else if (Array.isArray(content)) {
    text = content
      .map((part: unknown, i) => {
        const where = `${param}.content[${i}]`;
        if (!isObject(part)) throw bad(where, `${where} must be an object.`);
        if (part.type === "image") {
          images.push({ type: "image_url", image_url: { url: imageUrl(part as ContentBlock, where) } });
          return "";
        }
        if (part.type !== "text") throw bad(`${where}.type`, "tool_result content must be text or image blocks.");
        return requiredString(part, "text", where);
      })
      .join("");
  } else throw bad(`${param}.content`, `${param}.content must be a string or an array of blocks.`);
  if (block.is_error === true) text = `Error: ${text}`;
  const messages: ChatMessage[] = [{ role: "tool", tool_call_id: toolCallId, content: text }];
  if (images.length > 0) messages.push({ role: "user", content: images });
  return messages;
}

/** A client tool as a function tool; Anthropic's server tools run on Anthropic's side, not here. */
function chatTool(tool: Json & { name: string }, param: string): ChatTool {
  if (tool.type !== undefined && tool.type !== null && tool.type !== "custom") {
    throw bad(
      `${param}.type`,
      `Server tools (${String(tool.type)}) are not supported: only client tools with an input_schema, which your code runs.`,
    );
  }
  const fn: Json & { name: string } = {
    name: tool.name,
    parameters: isObject(tool.input_schema) ? tool.input_schema : { type: "object" },
  };
  if (typeof tool.description === "string") fn.description = tool.description;
  return { type: "function", function: fn };
}

function chatToolChoice(choice: Json & { type: string }): ChatBody["tool_choice"] {
  switch (choice.type) {
    case "auto":
      return "auto";
    case "any":
      return "required";
    case "none":
      return "none";
    case "tool":
      return { type: "function", function: { name: requiredString(choice, "name", "tool_choice") } };
    default:
      throw bad("tool_choice.type", "tool_choice.type must be auto, any, tool or none.");
  }
}
