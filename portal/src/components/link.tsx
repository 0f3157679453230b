import type { AnchorHTMLAttributes, MouseEvent } from "react";
import { BASE, navigate } from "../lib/router.ts";

/** A link to a portal page that navigates without reloading (and still opens in a new tab). */
export function Link({ to, ...rest }: AnchorHTMLAttributes<HTMLAnchorElement> & { to: string }) {
  const onClick = (event: MouseEvent<HTMLAnchorElement>) => {
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    navigate(to);
  };
  return <a href={BASE + to} onClick={onClick} {...rest} />;
}
