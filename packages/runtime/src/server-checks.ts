import { request, type Dispatcher } from "undici";

/** How the registry calls a hoster's server for checks and probes. */
export interface ServerCheckSettings {
  /** The hoster agent (hoster-agent.ts): it refuses forbidden addresses at connect time. */
  agent: Dispatcher;
  /** Limit of each whole call (connect, headers and body). */
  timeoutMs: number;
}

/** /v1/models answers larger than this are refused: a model list is a few kilobytes. */
const MAX_BODY_BYTES = 1 << 20;

/**
 * A failed check. Its message is written for the hoster and is safe to show: it names the path,
 * the status and the registered model ids, never the token or anything the server sent back.
 */
export class ServerCheckError extends Error {
  override name = "ServerCheckError";
  /** The registration field to blame: `endpoint_url`, `api_key` or `models[i].model_id`. */
  readonly param: string;

  constructor(message: string, param = "endpoint_url") {
    super(message);
    this.param = param;
  }
}

export interface ServerAnswer {
  status: number;
  body: Buffer;
}

/**
 * Calls `method path` under the endpoint (with the token as bearer, and `json` as the body when
 * given) through the hoster agent, within the settings' time limit; reads at most MAX_BODY_BYTES
 * of the answer. A failure is a ServerCheckError whose message carries nothing the server sent.
 * Registration's checks, the health probes and verification's probes all call hosters this way.
 */
export async function callServer(
  endpoint: URL,
  call: { method: "GET" | "POST"; path: string; token?: string; json?: unknown },
  settings: ServerCheckSettings,
): Promise<ServerAnswer> {
  const what = `${call.method} ${call.path}`;
  const url = new URL(endpoint);
  // An endpoint with no path has the pathname "/": join without doubling the slash.
  url.pathname = `${endpoint.pathname.replace(/\/+$/, "")}${call.path}`;
  let response: Dispatcher.ResponseData;
  try {
    response = await request(url, {
      method: call.method,
      dispatcher: settings.agent,
      headers: {
        accept: "application/json",
        ...(call.token === undefined ? {} : { authorization: `Bearer ${call.token}` }),
        ...(call.json === undefined ? {} : { "content-type": "application/json" }),
      },
      body: call.json === undefined ? undefined : JSON.stringify(call.json),
      headersTimeout: settings.timeoutMs,
      bodyTimeout: settings.timeoutMs,
      signal: AbortSignal.timeout(settings.timeoutMs),
    });
  } catch (err) {
    throw unreachable(what, err, settings.timeoutMs);
  }
  const parts: Buffer[] = [];
  let size = 0;
  try {
    for await (const part of response.body) {
      size += (part as Buffer).length;
      if (size > MAX_BODY_BYTES) {
        response.body.destroy();
        throw new ServerCheckError(`Your server's answer to ${what} is larger than ${MAX_BODY_BYTES} bytes.`);
      }
      parts.push(part as Buffer);
    }
  } catch (err) {
    if (err instanceof ServerCheckError) throw err;
    throw unreachable(what, err, settings.timeoutMs);
  }
  return { status: response.statusCode, body: Buffer.concat(parts) };
}

/** GET `path` under the endpoint (callServer). */
const get = (endpoint: URL, path: string, token: string | undefined, settings: ServerCheckSettings) =>
  callServer(endpoint, { method: "GET", path, token }, settings);

/** Why a call failed, in words that carry no upstream detail beyond a well-known error code. */
function unreachable(what: string, err: unknown, timeoutMs: number): ServerCheckError {
  const e = err as { name?: string; code?: string } | undefined;
  if (e?.code === "ERR_FORBIDDEN_UPSTREAM_ADDRESS") {
    return new ServerCheckError("endpoint_url resolves to an address the service may not call.");
  }
  if (e?.name === "TimeoutError" || e?.code === "UND_ERR_HEADERS_TIMEOUT" || e?.code === "UND_ERR_BODY_TIMEOUT") {
    return new ServerCheckError(`Your server did not answer ${what} within ${timeoutMs} ms.`);
  }
  const code = typeof e?.code === "string" && /^[A-Z_]{3,40}$/.test(e.code) ? ` (${e.code})` : "";
  return new ServerCheckError(`Could not reach your server for ${what}${code}.`);
}

/** GET /health must answer 2xx. */
export async function checkHealth(endpoint: URL, settings: ServerCheckSettings): Promise<void> {
  const { status } = await get(endpoint, "/health", undefined, settings);
  if (status < 200 || status > 299) {
    throw new ServerCheckError(`Your server answered GET /health with status ${status}; it must answer 2xx.`);
  }
}

/** The ids of an OpenAI model list (`{"data": [{"id": ...}]}`), or undefined when it is not one. */
function listedModelIds(body: Buffer): Set<string> | undefined {
  try {
    const parsed = JSON.parse(body.toString("utf8")) as { data?: unknown };
    if (!Array.isArray(parsed.data)) return undefined;
    return new Set(parsed.data.map((m: { id?: unknown } | null) => m?.id).filter((id) => typeof id === "string"));
  } catch {
    return undefined;
  }
}

/** GET /v1/models with the token must answer 2xx and list every registered model id. */
export async function checkModels(
  endpoint: URL,
  token: string,
  modelIds: readonly string[],
  settings: ServerCheckSettings,
): Promise<void> {
  const { status, body } = await get(endpoint, "/v1/models", token, settings);
  if (status === 401 || status === 403) {
    throw new ServerCheckError(
      `Your server refused GET /v1/models with the api_key as bearer token (status ${status}).`,
      "api_key",
    );
  }
  if (status < 200 || status > 299) {
    throw new ServerCheckError(`Your server answered GET /v1/models with status ${status}; it must answer 2xx.`);
  }
  const listed = listedModelIds(body);
  if (!listed) {
    throw new ServerCheckError('Your server\'s GET /v1/models answer is not a model list ({"data": [{"id": ...}]}).');
  }
  const missing = modelIds.findIndex((id) => !listed.has(id));
  if (missing !== -1) {
    throw new ServerCheckError(
      `Your server's GET /v1/models does not list the model "${modelIds[missing]}".`,
      `models[${missing}].model_id`,
    );
  }
}

/** GET /v1/models without a token must be refused: a server left open is anyone's to use. */
export async function checkRequiresToken(endpoint: URL, settings: ServerCheckSettings): Promise<void> {
  const { status } = await get(endpoint, "/v1/models", undefined, settings);
  if (status >= 200 && status <= 299) {
    throw new ServerCheckError("Your server answered /v1/models without a token; it must require the bearer token.");
  }
  if (status !== 401 && status !== 403) {
    throw new ServerCheckError(
      `Your server answered GET /v1/models without a token with status ${status}; it must refuse it with 401 or 403.`,
    );
  }
}

/**
 * The three registration checks (docs/adr/0032-hoster-registration-and-endpoint-guard.md), in
 * order; throws the first ServerCheckError.
 */
export async function verifyHosterServer(
  endpoint: URL,
  token: string,
  modelIds: readonly string[],
  settings: ServerCheckSettings,
): Promise<void> {
  await checkHealth(endpoint, settings);
  await checkModels(endpoint, token, modelIds, settings);
  await checkRequiresToken(endpoint, settings);
}
