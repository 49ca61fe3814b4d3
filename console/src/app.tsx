// The shell: who is signed in decides between the sign-in and the app; the path decides the page.
// A 401 that a refresh cannot cure swaps the page for the sign-in without touching the URL, so
// signing in again lands on the page the user was on.
import { useEffect, useState } from 'preact/hooks';

import { type ApiError, asApiError } from './api/errors';
import { ProjectShell } from './project';
import { AcceptInvitation } from './pages/AcceptInvitation';
import { Account } from './pages/Account';
import { Login } from './pages/Login';
import { Projects } from './pages/Projects';
import { ErrorAlert, Loading } from './components/ui';
import { Link, navigate, useLocation } from './lib/router';
import { loadSession, projects, session, signOut } from './lib/session';
import { useStore } from './lib/store';
import { UploadTray } from './pages/UploadTray';
import { lastProject, UserMenu } from './components/shell';

export function App() {
  const s = useStore(session);
  const loc = useLocation();
  const [fatal, setFatal] = useState<ApiError | undefined>(undefined);
  const start = () => {
    setFatal(undefined);
    loadSession().catch((e: unknown) => setFatal(asApiError(e)));
  };
  useEffect(start, []);

  if (loc.path === '/accept-invitation') {
    return (
      <Bare>
        <AcceptInvitation />
      </Bare>
    );
  }
  if (s.state === 'loading') {
    return <Bare>{fatal ? <ErrorAlert error={fatal} onRetry={start} /> : <Loading what="the console" />}</Bare>;
  }
  if (s.state === 'signed-out') {
    return (
      <Bare>
        <Login notice={s.notice} />
      </Bare>
    );
  }
  return <SignedIn email={s.user.email} />;
}

/** The frame of the pages seen signed out. */
function Bare({ children }: { children: preact.ComponentChildren }) {
  return (
    <>
      <header class="top">
        <span class="brand">Sluice</span>
      </header>
      <main id="main" class="narrow">
        {children}
      </main>
    </>
  );
}

function SignedIn({ email }: { email: string }) {
  const loc = useLocation();
  const list = useStore(projects) ?? [];
  const [signOutError, setSignOutError] = useState<ApiError | undefined>(undefined);
  const inProject = matchPrefix(loc.path);

  useEffect(() => {
    if (loc.path !== '/') return;
    const last = lastProject();
    const target = list.find((p) => p.slug === last) ?? list[0];
    navigate(target ? `/p/${encodeURIComponent(target.slug)}/streams` : '/projects', { replace: true });
  }, [loc.path, list]);

  let page: preact.ComponentChildren;
  if (loc.path === '/account') page = <Account />;
  else if (loc.path === '/projects') page = <Projects />;
  else if (inProject) page = null;
  else if (loc.path === '/') page = <Loading what="your projects" />;
  else page = <NotFound />;

  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      {inProject ? (
        <ProjectShell
          slug={inProject.slug}
          email={email}
          signOutError={signOutError}
          onSignOut={() => doSignOut(setSignOutError)}
        />
      ) : (
        <>
          <header class="top">
            <Link class="brand" href="/">
              Sluice
            </Link>
            <UserMenu email={email} onSignOut={() => doSignOut(setSignOutError)} />
          </header>
          <main id="main">
            <ErrorAlert error={signOutError} />
            {page}
          </main>
        </>
      )}
      {/* The VOD list shows the uploads beside its drop zone; every other page shows them here. */}
      {!/\/vod$/.test(loc.path) && <UploadTray />}
    </>
  );
}

function matchPrefix(path: string): { slug: string } | null {
  const m = /^\/p\/([^/]+)(\/|$)/.exec(path);
  return m?.[1] ? { slug: decodeURIComponent(m[1]) } : null;
}

function doSignOut(setError: (e: ApiError | undefined) => void) {
  setError(undefined);
  signOut().catch((e: unknown) => setError(asApiError(e)));
}

function NotFound() {
  useEffect(() => {
    document.title = 'Not found · Sluice';
  }, []);
  return (
    <section>
      <h1>Page not found</h1>
      <p>
        There is no page at this address. <Link href="/">Go to the console's start</Link>.
      </p>
    </section>
  );
}
