import { createContext, useContext } from "react";

/** Who is logged in (GET /auth/session); null when nobody is. */
export interface Session {
  kind: "customer" | "hoster";
  subject_id: string;
  email: string;
  expires_at: string;
}

export interface SessionState {
  session: Session | null;
  /** Asks the server again (after logging in or out). */
  refresh: () => Promise<void>;
}

export const SessionContext = createContext<SessionState>({ session: null, refresh: async () => {} });

export const useSession = () => useContext(SessionContext);
