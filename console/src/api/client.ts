// The one place the generated client is configured: same origin, cookies, and the silent session
// refresh (CONTRACT: Users and sessions, Console). Everything else imports `api` from here.
//
// A 401 from any call but the sign-in family triggers one `POST /v1/auth/refresh` — shared by every
// call that failed at the same moment, because the server revokes the whole refresh family when a
// used refresh token is presented again — and the call is retried once. If the refresh fails, the
// app is told the session is gone (it shows the sign-in over the page the user was on).
import { observeServerDate } from '../lib/clock';
import { client } from './generated/client.gen';
import * as sdk from './generated/sdk.gen';

export * from './generated/types.gen';
export const api = sdk;

const AUTH_PATHS = ['/v1/auth/login', '/v1/auth/refresh', '/v1/auth/logout', '/v1/auth/accept-invitation'];

type Listener = () => void;
const sessionLostListeners = new Set<Listener>();

/** Called when a 401 could not be cured by a refresh. Returns the unsubscribe function. */
export function onSessionLost(listener: Listener): () => void {
  sessionLostListeners.add(listener);
  return () => sessionLostListeners.delete(listener);
}

let refreshing: Promise<boolean> | null = null;

/** One refresh at a time; every caller that needs one waits for the same answer. */
export function refreshSession(): Promise<boolean> {
  if (!refreshing) {
    refreshing = sdk
      .refresh()
      .then((r) => r.response?.ok === true, () => false)
      .finally(() => {
        // Let the answer settle for callers already waiting; the next 401 starts a new one.
        setTimeout(() => (refreshing = null), 0);
      });
  }
  return refreshing;
}

async function fetchWithRefresh(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
  const request = new Request(input, init);
  const path = new URL(request.url).pathname;
  if (AUTH_PATHS.includes(path)) return fetch(request);
  const retry = request.clone();
  const response = await fetch(request);
  observeServerDate(response.headers.get('Date'));
  if (response.status !== 401) return response;
  if (!(await refreshSession())) {
    sessionLostListeners.forEach((l) => l());
    return response;
  }
  const second = await fetch(retry);
  if (second.status === 401) sessionLostListeners.forEach((l) => l());
  return second;
}

client.setConfig({
  baseUrl: window.location.origin,
  credentials: 'include',
  fetch: fetchWithRefresh,
});
