// A history router in a few lines: real paths (Sluice serves index.html for every client route),
// links that navigate without a reload, and focus moved to the new page's heading.
import type { AnchorHTMLAttributes, ComponentChildren, JSX } from 'preact';

import { createStore, useStore } from './store';

export interface Location {
  path: string;
  query: URLSearchParams;
}

function current(): Location {
  return { path: window.location.pathname, query: new URLSearchParams(window.location.search) };
}

const location = createStore<Location>(current());
let navigated = false;
window.addEventListener('popstate', () => {
  navigated = true;
  location.set(current());
});

/** Whether the user has moved within the app since it loaded (then a new page takes the focus). */
export const hasNavigated = () => navigated;

export function navigate(to: string, options: { replace?: boolean } = {}): void {
  if (to === window.location.pathname + window.location.search) return;
  if (options.replace) window.history.replaceState(null, '', to);
  else {
    window.history.pushState(null, '', to);
    navigated = true;
  }
  location.set(current());
  window.scrollTo(0, 0);
}

export function useLocation(): Location {
  return useStore(location);
}

/** `/p/:slug/streams/:id` against a path: the named parts, or null. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const want = pattern.split('/').filter(Boolean);
  const have = path.split('/').filter(Boolean);
  if (want.length !== have.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < want.length; i++) {
    const w = want[i] as string;
    const h = have[i] as string;
    if (w.startsWith(':')) params[w.slice(1)] = decodeURIComponent(h);
    else if (w !== h) return null;
  }
  return params;
}

/** Replaces the query string of the current page (filters, pages) without a new history entry. */
export function setQuery(values: Record<string, string | number | undefined | null>): void {
  const q = new URLSearchParams(window.location.search);
  for (const [k, v] of Object.entries(values)) {
    if (v === undefined || v === null || v === '') q.delete(k);
    else q.set(k, String(v));
  }
  const s = q.toString();
  navigate(window.location.pathname + (s ? `?${s}` : ''), { replace: true });
}

type LinkProps = AnchorHTMLAttributes<HTMLAnchorElement> & { href: string; children?: ComponentChildren };

export function Link({ href, onClick, ...rest }: LinkProps) {
  const click = (e: JSX.TargetedMouseEvent<HTMLAnchorElement>) => {
    if (onClick) onClick(e);
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(href);
  };
  return <a href={href} onClick={click} {...rest} />;
}
