import type { ChatBody, ChatTool } from "../chat/chat-body.ts";
import { badField as bad, isObject, requiredString, type Json } from "../translation/chat-json.ts";

/**
 * What a chat function tool stands for in the Responses request: model servers know only
 * function tools, so the tool types a Responses client declares are offered as functions and
 * the model's calls are read back into the item types that client expects. Coding agents
 * (Codex CLI) declare `custom` freeform tools (their input is free text, such as a patch) and
 * `namespace`s grouping function or custom tools.
 */
export interface ToolOrigin {
  kind: "function" | "custom";
  /** The tool's name inside its namespace (the name the client declared). */
  name: string;
  namespace?: string;
}

/** The request's tools as chat function tools, and what each chat name stands for. */
export interface TranslatedTools {
  chatTools: ChatTool[];
  origins: Map<string, ToolOrigin>;
}

/**
 * Tools a Responses client may declare whose work is done on OpenAI's side, with nothing for the
 * client to run: a model server here cannot run them, so the model is not offered them and
 * answers without. Codex CLI declares both with every turn (web search as cached-only, tool
 * search over tools it holds back); refusing them would refuse every turn it sends.
 */
const NOT_OFFERED = new Set(["web_search", "web_search_preview", "tool_search"]);

/** A custom tool's free text travels as the one string argument of its function. */
const CUSTOM_INPUT = "input";

/** Chat function names allow letters, digits, `_` and `-`; a namespace joins its tools' names so. */
export const namespacedName = (namespace: string, name: string) => `${namespace}__${name}`;

export function translateTools(tools: ReadonlyArray<Json> | null | undefined): TranslatedTools {
  const chatTools: ChatTool[] = [];
  const origins = new Map<string, ToolOrigin>();
  const add = (tool: Json, param: string, namespace?: string) => {
    const name = requiredString(tool, "name", param);
    const chatName = namespace === undefined ? name : namespacedName(namespace, name);
    if (origins.has(chatName)) throw bad(`${param}.name`, `Two tools are named ${JSON.stringify(chatName)}.`);
    const kind = tool.type === "custom" ? "custom" : "function";
    origins.set(chatName, { kind, name, ...(namespace === undefined ? {} : { namespace }) });
    chatTools.push(kind === "custom" ? customAsFunction(tool, chatName) : functionTool(tool, chatName));
  };
  (tools ?? []).forEach((tool, i) => {
    const param = `tools[${i}]`;
    if (!isObject(tool)) throw bad(param, `${param} must be an object.`);
    if (tool.type === "function" || tool.type === "custom") add(tool, param);
    else if (tool.type === "namespace") {
      const namespace = requiredString(tool, "name", param);
      if (!Array.isArray(tool.tools)) throw bad(`${param}.tools`, `${param}.tools must be an array of tools.`);
      tool.tools.forEach((inner: unknown, j) => {
        const where = `${param}.tools[${j}]`;
        if (!isObject(inner) || (inner.type !== "function" && inner.type !== "custom")) {
          throw bad(`${where}.type`, "A namespace holds function and custom tools only.");
        }
        add(inner, where, namespace);
      });
    } else if (typeof tool.type === "string" && NOT_OFFERED.has(tool.type)) {
      // Not offered: see NOT_OFFERED.
    } else {
      throw bad(
        `${param}.type`,
        `Built-in tools (${String(tool.type)}) are not supported: only function, custom and namespace tools, ` +
          "which your code runs (web_search and tool_search are accepted and not offered to the model).",
      );
    }
  });
  return { chatTools, origins };
}

function functionTool(tool: Json, chatName: string): ChatTool {
  const fn: Json & { name: string } = { name: chatName };
  for (const field of ["description", "parameters", "strict"]) if (tool[field] != null) fn[field] = tool[field];
  return { type: "function", function: fn };
}

/**
 * A freeform tool as a function of one string: its grammar (Lark or a regex), which no chat
 * server enforces, is shown to the model in the description so its input can follow it.
 */
function customAsFunction(tool: Json, chatName: string): ChatTool {
  const format = isObject(tool.format) ? tool.format : undefined;
  const grammar =
    format?.type === "grammar" && typeof format.definition === "string"
      ? `\n\nThe input must follow this ${String(format.syntax ?? "")} grammar:\n${format.definition}`
      : "";
  const description = `${typeof tool.description === "string" ? tool.description : ""}${grammar}`.trim();
  return {
    type: "function",
    function: {
      name: chatName,
      ...(description === "" ? {} : { description }),
      parameters: {
        type: "object",
        properties: { [CUSTOM_INPUT]: { type: "string", description: "The tool's input, as free text." } },
        required: [CUSTOM_INPUT],
        additionalProperties: false,
      },
    },
  };
}

/** The chat function name a call item of the request names (a namespaced call joins its namespace). */
export function chatNameOfCall(item: Json, param: string): string {
  const name = requiredString(item, "name", param);
  return typeof item.namespace === "string" && item.namespace !== "" ? namespacedName(item.namespace, name) : name;
}

/** A `custom_tool_call` input item's free text as its function's arguments. */
export const customArguments = (input: string) => JSON.stringify({ [CUSTOM_INPUT]: input });

/** The free text of a custom tool's call from its function's arguments (as they came, if not the one string). */
export function customInput(args: string): string {
  try {
    const parsed: unknown = JSON.parse(args);
    if (isObject(parsed) && typeof parsed[CUSTOM_INPUT] === "string") return parsed[CUSTOM_INPUT];
  } catch {
    // A model that broke the JSON still meant its text as the input.
  }
  return args;
}

/** The chat tool_choice for a Responses one (a named function or custom tool, maybe in a namespace). */
export function chatToolChoice(choice: unknown, origins: Map<string, ToolOrigin>): ChatBody["tool_choice"] {
  if (choice === undefined || choice === null || choice === "none" || choice === "auto" || choice === "required") {
    return choice;
  }
  if (isObject(choice) && (choice.type === "function" || choice.type === "custom") && typeof choice.name === "string") {
    const name = typeof choice.namespace === "string" ? namespacedName(choice.namespace, choice.name) : choice.name;
    if (!origins.has(name))
      throw bad("tool_choice.name", `tool_choice names ${JSON.stringify(name)}, which tools does not offer.`);
    return { type: "function", function: { name } };
  }
  throw bad("tool_choice", "tool_choice must be none, auto, required or {type: 'function' | 'custom', name}.");
}
