import { useEffect, useState } from "react";

/** Where the portal lives on the edge; every page path is below it. */
export const BASE = "/portal";

/** The page path below /portal ("/", "/keys", ...). */
export function currentPage(): string {
  const path = window.location.pathname;
  const page = path.startsWith(BASE) ? path.slice(BASE.length) : path;
  return page === "" ? "/" : page;
}

const listeners = new Set<() => void>();

export function navigate(page: string): void {
  window.history.pushState(null, "", BASE + page);
  listeners.forEach((listener) => listener());
  window.scrollTo(0, 0);
}

/** The current page, re-rendered on navigation and on the browser's back and forward. */
export function usePage(): string {
  const [page, setPage] = useState(currentPage);
  useEffect(() => {
    const update = () => setPage(currentPage());
    listeners.add(update);
    window.addEventListener("popstate", update);
    return () => {
      listeners.delete(update);
      window.removeEventListener("popstate", update);
    };
  }, []);
  return page;
}
