import type { ChatBody, ChatMessage } from "../chat/chat-body.ts";
import { badField as bad, isObject, requiredString, type Json } from "../translation/chat-json.ts";
import type { InputItem, ResponsesBody } from "./responses-body.ts";
import { chatNameOfCall, chatToolChoice, customArguments, translateTools } from "./tool-translation.ts";

/** The gateway keeps no responses; every refusal of state says what to send instead. */
const STATELESS = "This gateway serves the Responses API stateless: it stores no responses or items.";

/**
 * The chat-completions body equivalent to a Responses API request: the answer then takes the one
 * chat path (admission, relay, metering) and is translated back (response-object.ts,
 * stream-translation.ts). What a stateless gateway cannot honour is refused with a 400 naming the
 * field, never silently dropped: previous_response_id, conversation, background, stored prompts,
 * item references, built-in tools. Fields with no meaning here (include, truncation, metadata,
 * store: false) are accepted and ignored, as are the reasoning items a client sends back (there
 * is no reasoning to continue); docs/responses-api.md lists every field.
 */
export function chatBodyFromResponses(body: ResponsesBody): ChatBody {
  refuseState(body);
  const messages: ChatMessage[] = [];
  if (typeof body.instructions === "string" && body.instructions !== "") {
    messages.push({ role: "system", content: body.instructions });
  }
  if (typeof body.input === "string") messages.push({ role: "user", content: body.input });
  else body.input.forEach((item, i) => addItem(messages, item, `input[${i}]`));
  if (messages.length === 0) throw bad("input", "input has no message to answer.");

  const { chatTools: tools, origins } = translateTools(body.tools);
  const chat: ChatBody = { model: body.model, messages };
  const set = (field: string, value: unknown) => {
    if (value !== undefined && value !== null) chat[field] = value;
  };
  if (body.stream === true) {
    chat.stream = true;
    // The usage chunk ends the chat stream; response.completed carries it.
    chat.stream_options = { include_usage: true };
  }
  set("max_completion_tokens", body.max_output_tokens);
  set("temperature", body.temperature);
  set("top_p", body.top_p);
  if (tools.length > 0) {
    // Chat servers refuse tool_choice and parallel_tool_calls without tools.
    chat.tools = tools;
    set("tool_choice", chatToolChoice(body.tool_choice, origins));
    set("parallel_tool_calls", body.parallel_tool_calls);
  } else if (isObject(body.tool_choice) || body.tool_choice === "required") {
    throw bad("tool_choice", "tool_choice asks for a tool call, but tools offers none.");
  }
  set("response_format", chatResponseFormat(body.text?.format));
  const reasoning = isObject(body.reasoning) ? body.reasoning : undefined;
  set("reasoning_effort", reasoning?.effort);
  // Same meaning in both APIs: passed on to the model server as they came.
  for (const field of ["user", "safety_identifier", "prompt_cache_key", "service_tier", "seed"])
    set(field, body[field]);
  return chat;
}

function refuseState(body: ResponsesBody): void {
  if (body.previous_response_id != null) {
    throw bad(
      "previous_response_id",
      `previous_response_id is not supported. ${STATELESS} Send the whole conversation in \`input\` instead.`,
    );
  }
  if (body.conversation != null) {
    throw bad("conversation", `conversation is not supported. ${STATELESS} Send the whole conversation in \`input\`.`);
  }
  if (body.background === true) {
    throw bad("background", `background is not supported. ${STATELESS} Use stream: true for long answers.`);
  }
  if (body.prompt != null) throw bad("prompt", "Stored prompt templates (`prompt`) are not supported; send `input`.");
}

/** Appends the chat message(s) of one input item. */
function addItem(messages: ChatMessage[], item: InputItem, param: string): void {
  if (!isObject(item)) throw bad(param, `${param} must be an object.`);
  const type = item.type ?? (typeof item.role === "string" ? "message" : undefined);
  switch (type) {
    case "message":
      messages.push(chatMessage(item, param));
      return;
    case "function_call":
      addToolCall(
        messages,
        requiredString(item, "call_id", param),
        chatNameOfCall(item, param),
        requiredString(item, "arguments", param),
      );
      return;
    case "custom_tool_call": {
      const input = customArguments(requiredString(item, "input", param));
      addToolCall(messages, requiredString(item, "call_id", param), chatNameOfCall(item, param), input);
      return;
    }
    case "function_call_output":
    case "custom_tool_call_output": {
      const callId = requiredString(item, "call_id", param);
      messages.push({ role: "tool", tool_call_id: callId, content: outputText(item.output, `${param}.output`) });
      return;
    }
    case "reasoning":
      // The model's earlier reasoning, sent back for it to continue (Codex CLI sends its
      // encrypted form): no model here can read it, and the answer does not need it.
      return;
    case "item_reference":
      throw bad(
        param,
        `Input items of type item_reference are not supported (store: true). ${STATELESS} Send the items ` +
          "themselves: with the Vercel AI SDK, set providerOptions.openai.store: false.",
      );
    default:
      throw bad(
        `${param}.type`,
        `Input items of type ${JSON.stringify(type)} are not supported: only message, function_call, ` +
          "custom_tool_call, their outputs and reasoning.",
      );
  }
}

function chatMessage(item: Json, param: string): ChatMessage {
  const role = item.role;
  if (role !== "user" && role !== "assistant" && role !== "system" && role !== "developer") {
    throw bad(`${param}.role`, `${param}.role must be user, assistant, system or developer.`);
  }
  const content = item.content;
  if (typeof content === "string") return { role, content };
  if (!Array.isArray(content)) throw bad(`${param}.content`, `${param}.content must be a string or an array of parts.`);
  const parts = content.map((part: unknown, i) => chatPart(part, `${param}.content[${i}]`));
  // Chat takes text only from the assistant and from system messages: their parts are joined.
  if (role !== "user") return { role, content: parts.map((part) => (part.type === "text" ? part.text : "")).join("") };
  return { role, content: parts };
}

function chatPart(part: unknown, param: string): Json {
  if (!isObject(part)) throw bad(param, `${param} must be an object.`);
  switch (part.type) {
    case "input_text":
    case "output_text":
      return { type: "text", text: requiredString(part, "text", param) };
    case "refusal":
      return { type: "text", text: requiredString(part, "refusal", param) };
    case "input_image":
      if (typeof part.image_url !== "string") {
        throw bad(
          `${param}.image_url`,
          "Images must be sent as image_url (a URL or data URL); file_id is not supported.",
        );
      }
      return { type: "image_url", image_url: { url: part.image_url, ...(part.detail ? { detail: part.detail } : {}) } };
    case "input_file":
      if (typeof part.file_data !== "string") {
        throw bad(`${param}.file_data`, "Files must be sent as file_data; file_id and file_url are not supported.");
      }
      return {
        type: "file",
        file: { file_data: part.file_data, ...(part.filename ? { filename: part.filename } : {}) },
      };
    default:
      throw bad(`${param}.type`, `Content parts of type ${JSON.stringify(part.type)} are not supported.`);
  }
}

/** A call item joins the assistant message just before it, as chat carries calls. */
function addToolCall(messages: ChatMessage[], id: string, name: string, args: string): void {
  const call = { id, type: "function", function: { name, arguments: args } };
  const last = messages.at(-1);
  if (last?.role === "assistant") {
    last.tool_calls = [...(last.tool_calls ?? []), call];
    if (last.content === "") last.content = null;
  } else {
    messages.push({ role: "assistant", content: null, tool_calls: [call] });
  }
}

function outputText(output: unknown, param: string): string {
  if (typeof output === "string") return output;
  if (!Array.isArray(output)) throw bad(param, `${param} must be a string or an array of parts.`);
  return output.map((part: unknown, i) => String(chatPart(part, `${param}[${i}]`).text ?? "")).join("");
}

function chatResponseFormat(format: Json | null | undefined): Json | undefined {
  if (!format || format.type === "text") return undefined;
  if (format.type === "json_object") return { type: "json_object" };
  if (format.type !== "json_schema") {
    throw bad("text.format.type", "text.format.type must be text, json_schema or json_object.");
  }
  const jsonSchema: Json = { name: requiredString(format, "name", "text.format") };
  if (!isObject(format.schema)) throw bad("text.format.schema", "text.format.schema must be a JSON schema object.");
  for (const field of ["description", "schema", "strict"]) if (format[field] != null) jsonSchema[field] = format[field];
  return { type: "json_schema", json_schema: jsonSchema };
}
