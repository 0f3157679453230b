import { useCallback, useEffect, useState, type ReactNode } from "react";
import { Layout } from "./components/layout.tsx";
import { Loading } from "./components/ui.tsx";
import { api } from "./lib/api.ts";
import { usePage } from "./lib/router.ts";
import { SessionContext, sessionOf, type Session, type SessionAnswer } from "./lib/session.ts";
import { EarningsPage } from "./pages/earnings.tsx";
import { HosterProfilePage } from "./pages/hoster-profile.tsx";
import { HosterRegisterPage } from "./pages/hoster-register.tsx";
import { HostersPage } from "./pages/hosters.tsx";
import { KeysPage } from "./pages/keys.tsx";
import { LoginPage } from "./pages/login.tsx";
import { ModelsPage } from "./pages/models.tsx";
import { OverviewPage } from "./pages/overview.tsx";
import { PlansPage } from "./pages/plans.tsx";
import { PlaygroundPage } from "./pages/playground.tsx";
import { SignupPage } from "./pages/signup.tsx";
import { SubscribersPage } from "./pages/subscribers.tsx";
import { SubscriptionsPage } from "./pages/subscriptions.tsx";
import { UsagePage } from "./pages/usage.tsx";

type Pages = Record<string, [title: string, render: () => ReactNode]>;

const PUBLIC: Pages = {
  "/": ["Log in", () => <LoginPage />],
  "/signup": ["Create an account", () => <SignupPage />],
  "/hoster/register": ["Register as a hoster", () => <HosterRegisterPage />],
};

const CUSTOMER: Pages = {
  "/": ["Overview", () => <OverviewPage />],
  "/usage": ["Usage", () => <UsagePage />],
  "/keys": ["API keys", () => <KeysPage />],
  "/playground": ["Playground", () => <PlaygroundPage />],
  "/models": ["Open models", () => <ModelsPage />],
  "/hosters": ["Hosters and plans", () => <HostersPage />],
  "/subscriptions": ["Subscriptions", () => <SubscriptionsPage />],
};

const HOSTER: Pages = {
  "/": ["Your server", () => <HosterProfilePage />],
  "/plans": ["Plans", () => <PlansPage />],
  "/subscribers": ["Subscribers", () => <SubscribersPage />],
  "/earnings": ["Earnings", () => <EarningsPage />],
};

export function App() {
  const page = usePage();
  const [session, setSession] = useState<Session | null>();
  const refresh = useCallback(async () => {
    setSession(await api<SessionAnswer>("/auth/session").then(sessionOf, () => null));
  }, []);
  useEffect(() => {
    void refresh();
  }, [refresh]);

  useEffect(() => {
    document.title = `${titleOf(page, session)} · Inference marketplace`;
  }, [page, session]);

  if (session === undefined) return <Loading what="the portal" />;
  const pages = session === null ? PUBLIC : session.kind === "hoster" ? HOSTER : CUSTOMER;
  const [title, render] = pages[page] ?? ["Page not found", () => <p>There is no such page here.</p>];
  return (
    <SessionContext.Provider value={{ session, refresh }}>
      <Layout page={page} title={title}>
        {/* A new page starts with fresh state (forms, shown-once secrets). */}
        <div key={`${session?.kind}:${page}`}>{render()}</div>
      </Layout>
    </SessionContext.Provider>
  );
}

function titleOf(page: string, session: Session | null | undefined): string {
  const pages = !session ? PUBLIC : session.kind === "hoster" ? HOSTER : CUSTOMER;
  return pages[page]?.[0] ?? "Page not found";
}
