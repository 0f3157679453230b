import { errorText } from "./error-text.ts";

/** An answer of the API that was not a success, in words a person understands. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export interface CallOptions {
  method?: "GET" | "POST" | "PATCH" | "DELETE";
  body?: unknown;
  /** A bearer key for this call (the playground's session key, a pasted scoped key). */
  apiKey?: string;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

/**
 * Calls the public API of this site. The session cookie goes with every call (same origin), so
 * the customer and hoster routes know who is asking; the edge's CSRF guard sees our own Origin.
 */
export async function call(path: string, options: CallOptions = {}): Promise<Response> {
  const headers: Record<string, string> = { accept: "application/json", ...options.headers };
  if (options.body !== undefined) headers["content-type"] = "application/json";
  if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`;
  let response: Response;
  try {
    response = await fetch(path, {
      method: options.method ?? "GET",
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      credentials: "same-origin",
      signal: options.signal,
    });
  } catch (err) {
    if ((err as Error).name === "AbortError") throw err;
    throw new ApiError(0, "network", "The server cannot be reached. Check your connection and try again.");
  }
  if (!response.ok) throw await apiError(response);
  return response;
}

/** `call`, then the JSON body. */
export async function api<T>(path: string, options: CallOptions = {}): Promise<T> {
  return (await (await call(path, options)).json()) as T;
}

async function apiError(response: Response): Promise<ApiError> {
  let error: { message?: string; code?: string } = {};
  try {
    error = ((await response.json()) as { error?: typeof error }).error ?? {};
  } catch {
    // Not our JSON (a proxy's page): the status alone has to do.
  }
  const requestId = response.headers.get("x-request-id") ?? undefined;
  return new ApiError(response.status, error.code ?? "", errorText(response.status, error, requestId));
}
