/**
 * Where and how to call a model: an OpenAI-compatible server's base URL (`/v1/chat/completions`
 * is appended), its bearer token and the name it knows the model by. `platform` servers are the
 * operator's (the local model server, the cloud API), called as they are; `hoster` servers
 * belong to third parties and are called only through the guarded connector, which refuses
 * private and metadata addresses at connect time. `key` names the server for outlier ejection
 * and logs (`<provider> <origin+path> <model id>`, or `hoster <id>`) and never holds the token.
 * The token lives in the edge's memory only: never in a log line, an error, a metric or a response.
 */
export interface UpstreamTarget {
  baseUrl: string;
  token: string;
  upstreamModel: string;
  trust: "platform" | "hoster";
  key: string;
}
