/** A JSON body as the tests read it. */
export type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

export interface CallOptions {
  /** An API key, sent as `Authorization: Bearer …`. */
  key?: string;
  /** A session cookie (`mk_session=…`). */
  cookie?: string;
  /** Sent as JSON. */
  body?: unknown;
  origin?: string;
  idempotencyKey?: string;
}

/**
 * One call of the public API as a client makes it, answered as status, headers and the JSON body
 * (every answer of the edge is JSON, errors included). The e2e tests' one way to call the API
 * without an SDK.
 */
export async function apiCall(
  baseUrl: string,
  method: string,
  path: string,
  options: CallOptions = {},
): Promise<{ status: number; headers: Headers; body: Json }> {
  const headers: Record<string, string> = {};
  if (options.key) headers.authorization = `Bearer ${options.key}`;
  if (options.cookie) headers.cookie = options.cookie;
  if (options.origin) headers.origin = options.origin;
  if (options.idempotencyKey) headers["idempotency-key"] = options.idempotencyKey;
  if (options.body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Json };
}
