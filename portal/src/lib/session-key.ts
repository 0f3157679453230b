import { api } from "./api.ts";

/**
 * The playground's key: minted for this login session (POST /auth/session-key), held in this
 * module's memory only (never storage), forgotten at logout. The server revokes it at logout
 * and it expires with the session anyway.
 */
let current: Promise<string> | undefined;

export function sessionKey(): Promise<string> {
  current ??= api<{ api_key: string }>("/auth/session-key", { method: "POST" }).then(
    (created) => created.api_key,
    (err: unknown) => {
      current = undefined;
      throw err;
    },
  );
  return current;
}

export function forgetSessionKey(): void {
  current = undefined;
}
