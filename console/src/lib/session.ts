// Who is signed in, and their projects with their role in each (`GET /v1/auth/me` says who;
// `GET /v1/projects` carries the caller's `role` per project).
import { api, onSessionLost, type Project, type User } from '../api/client';
import { ApiError, call } from '../api/errors';
import { closeAllFeeds } from '../events';
import { createStore } from './store';

export type Session =
  | { state: 'loading' }
  | { state: 'signed-out'; notice?: string }
  | { state: 'signed-in'; user: User };

export const session = createStore<Session>({ state: 'loading' });
export const projects = createStore<Project[] | undefined>(undefined);

onSessionLost(() => {
  if (session.get().state === 'signed-in') {
    closeAllFeeds();
    session.set({ state: 'signed-out', notice: 'Your session has ended. Sign in again to carry on where you were.' });
  }
});

export async function loadSession(): Promise<void> {
  try {
    const user = await call(api.me());
    await loadProjects();
    session.set({ state: 'signed-in', user });
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) session.set({ state: 'signed-out' });
    else throw e;
  }
}

/** Every project of the user (pages of 100). */
export async function loadProjects(): Promise<Project[]> {
  const all: Project[] = [];
  for (let skip = 0; ; skip += 100) {
    const page = await call(api.listProjects({ query: { skip, limit: 100 } }));
    all.push(...page.items);
    if (page.items.length === 0 || all.length >= page.total) break;
  }
  projects.set(all);
  return all;
}

export async function signIn(email: string, password: string): Promise<void> {
  const user = await call(api.login({ body: { email, password } }));
  await loadProjects();
  session.set({ state: 'signed-in', user });
}

export async function signOut(): Promise<void> {
  await call(api.logout());
  closeAllFeeds();
  projects.set(undefined);
  session.set({ state: 'signed-out', notice: 'You have signed out.' });
}

export const canWrite = (p: Project) => p.role === 'member' || p.role === 'admin';
export const isAdmin = (p: Project) => p.role === 'admin';
