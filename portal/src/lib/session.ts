import { createContext, useContext } from "react";

/** Who is logged in; the portal holds null when nobody is. */
export interface Session {
  kind: "customer" | "hoster";
  subject_id: string;
  email: string;
  expires_at: string;
}

/** GET /auth/session's answer: a 200 either way, every field null when nobody is logged in. */
export type SessionAnswer = Session | { kind: null; subject_id: null; email: null; expires_at: null };

/** The session an answer of GET /auth/session names, or null when nobody is logged in. */
export const sessionOf = (answer: SessionAnswer): Session | null => (answer.kind === null ? null : answer);

export interface SessionState {
  session: Session | null;
  /** Asks the server again (after logging in or out). */
  refresh: () => Promise<void>;
}

export const SessionContext = createContext<SessionState>({ session: null, refresh: async () => {} });

export const useSession = () => useContext(SessionContext);
