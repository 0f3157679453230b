import { useEffect, useRef, type ReactNode } from "react";
import { api } from "../lib/api.ts";
import { navigate } from "../lib/router.ts";
import { useSession } from "../lib/session.ts";
import { forgetSessionKey } from "../lib/session-key.ts";
import { Link } from "./link.tsx";

const CUSTOMER_PAGES = [
  ["/", "Overview"],
  ["/usage", "Usage"],
  ["/keys", "API keys"],
  ["/playground", "Playground"],
  ["/models", "Models"],
  ["/hosters", "Hosters"],
  ["/subscriptions", "Subscriptions"],
] as const;

const HOSTER_PAGES = [
  ["/", "Profile"],
  ["/plans", "Plans"],
  ["/subscribers", "Subscribers"],
  ["/earnings", "Earnings"],
] as const;

export function Layout({ page, title, children }: { page: string; title: string; children: ReactNode }) {
  const { session, refresh } = useSession();
  const heading = useRef<HTMLHeadingElement>(null);
  const shown = useRef(page);
  // After a move to another page, focus goes to its heading: a screen reader then announces the
  // new page, and Tab continues from the top of its content, not from the menu link followed.
  useEffect(() => {
    if (shown.current === page) return;
    shown.current = page;
    heading.current?.focus();
  }, [page]);
  const pages = session?.kind === "hoster" ? HOSTER_PAGES : session ? CUSTOMER_PAGES : [];
  const logout = async () => {
    await api("/auth/logout", { method: "POST" }).catch(() => undefined);
    forgetSessionKey();
    await refresh();
    navigate("/");
  };
  return (
    <>
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header className="top">
        <Link to="/" className="brand">
          Inference marketplace
        </Link>
        {session && (
          <div className="who">
            <span className="muted">
              {session.kind === "hoster" ? "Hoster" : "Customer"} · {session.email}
            </span>
            <button type="button" className="secondary" onClick={logout}>
              Log out
            </button>
          </div>
        )}
      </header>
      {pages.length > 0 && (
        <nav aria-label="Portal" className="tabs">
          <ul>
            {pages.map(([to, label]) => (
              <li key={to}>
                <Link to={to} aria-current={page === to ? "page" : undefined}>
                  {label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
      )}
      <main id="main">
        <h1 ref={heading} tabIndex={-1}>
          {title}
        </h1>
        {children}
      </main>
    </>
  );
}
