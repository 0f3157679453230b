/** One probe call's outcome, for the checks and for the endpoint's live figures. */
export interface ProbeCall {
  status: number;
  latencyMs: number;
  /** The parsed JSON answer (non-streamed) or the SSE events' data (streamed); undefined when unreadable. */
  json?: unknown;
  events?: unknown[];
  /** Why the call failed, safe to show (no upstream text). */
  failure?: string;
}
