/** Codes whose server message is written for a developer; a person reading the portal gets these. */
const PLAIN_WORDS: Record<string, string> = {
  unauthenticated: "You are not logged in, or your session has ended. Please log in again.",
  invalid_credentials: "That e-mail and password do not match an account.",
  email_taken: "An account with this e-mail already exists. Log in instead.",
  invalid_api_key: "This API key is not valid (it may have been revoked or its subscription cancelled).",
};

/**
 * The sentence to show for an API error: the server's own message (they are written to be read,
 * e.g. the paused-subscription text must reach the person unchanged) unless a plainer one is
 * known for its code; a server failure names the request id for support and says nothing more.
 */
export function errorText(status: number, error: { message?: string; code?: string }, requestId?: string): string {
  const plain = error.code ? PLAIN_WORDS[error.code] : undefined;
  if (plain) return plain;
  if (status >= 500) {
    const what = (error.message ?? "Something went wrong on our side").replace(/\.$/, "");
    return `${what}. Please try again in a moment${requestId ? ` (reference ${requestId})` : ""}.`;
  }
  return error.message ?? `The request failed (HTTP ${status}).`;
}
