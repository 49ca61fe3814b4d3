// A project's frame: the header with the project switcher, the section navigation (what the
// caller's role may see), and the section's page.
import { useEffect, useState } from 'preact/hooks';

import { api, type Project } from './api/client';
import { type ApiError, asApiError, call } from './api/errors';
import { rememberProject, UserMenu } from './components/shell';
import { ErrorAlert, Gone, Loading } from './components/ui';
import { useFeedState, useProjectEvents } from './events';
import { Link, match, navigate, useLocation } from './lib/router';
import { isAdmin, projects } from './lib/session';
import { useStore } from './lib/store';
import { ApiKeys } from './pages/ApiKeys';
import { Members } from './pages/Members';
import { StreamNew } from './pages/StreamNew';
import { StreamPage } from './pages/StreamPage';
import { Streams } from './pages/Streams';
import { VodList } from './pages/VodList';
import { VodPage } from './pages/VodPage';
import { WebhookPage } from './pages/WebhookPage';
import { Webhooks } from './pages/Webhooks';

type Section = 'streams' | 'vod' | 'webhooks' | 'api-keys' | 'members';

const SECTIONS: { id: Section; label: string; testid: string; adminOnly: boolean }[] = [
  { id: 'streams', label: 'Streams', testid: 'nav-streams', adminOnly: false },
  { id: 'vod', label: 'VOD', testid: 'nav-vod', adminOnly: false },
  { id: 'webhooks', label: 'Webhooks', testid: 'nav-webhooks', adminOnly: false },
  // Key and member administration is for admins (CONTRACT: Console, Roles); the API refuses
  // members anyway, and a viewer sees no control that writes.
  { id: 'api-keys', label: 'API keys', testid: 'nav-api-keys', adminOnly: true },
  { id: 'members', label: 'Members', testid: 'nav-members', adminOnly: true },
];

export function ProjectShell({
  slug,
  email,
  signOutError,
  onSignOut,
}: {
  slug: string;
  email: string;
  signOutError: ApiError | undefined;
  onSignOut: () => void;
}) {
  const list = useStore(projects);
  const known = list?.find((p) => p.slug === slug);
  const [fetched, setFetched] = useState<Project | undefined>(undefined);
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const project = known ?? (fetched?.slug === slug ? fetched : undefined);

  useEffect(() => {
    if (known) return;
    // Not among the projects loaded at sign-in (added since, or a wrong link): ask for it.
    setError(undefined);
    call(api.getProject({ path: { slug } })).then(setFetched, (e: unknown) => setError(asApiError(e)));
  }, [slug, known]);

  useEffect(() => {
    if (project) rememberProject(project.slug);
  }, [project]);

  // One event feed per project for as long as the user is in it, whichever page is shown.
  useProjectEvents(slug, () => undefined);
  const feed = useFeedState(slug);

  const loc = useLocation();
  const base = `/p/${encodeURIComponent(slug)}`;
  const section = (loc.path.slice(base.length).split('/')[1] ?? '') as Section | '';

  let body: preact.ComponentChildren;
  if (project) body = <ProjectPage project={project} path={loc.path.slice(base.length) || '/'} />;
  else if (error?.gone) body = <Gone what="Project" back="/projects" backLabel="See your projects" />;
  else if (error) body = <ErrorAlert error={error} />;
  else body = <Loading what="the project" />;

  return (
    <>
      <header class="top">
        <Link class="brand" href="/">
          Sluice
        </Link>
        <ProjectSwitcher current={slug} section={section || 'streams'} list={list ?? (project ? [project] : [])} />
        <UserMenu email={email} onSignOut={onSignOut} />
      </header>
      {project && (
        <nav class="sections" aria-label="Project sections">
          <ul>
            {SECTIONS.filter((s) => !s.adminOnly || isAdmin(project)).map((s) => (
              <li key={s.id}>
                <Link
                  href={`${base}/${s.id}`}
                  data-testid={s.testid}
                  aria-current={section === s.id ? 'page' : undefined}
                >
                  {s.label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
      )}
      <main id="main">
        <ErrorAlert error={signOutError} />
        {feed === 'down' && (
          <p class="notice" role="status">
            Live updates are unavailable right now; pages re-read what changes every few seconds.
          </p>
        )}
        {body}
      </main>
    </>
  );
}

function ProjectSwitcher({ current, section, list }: { current: string; section: string; list: Project[] }) {
  const options = list.some((p) => p.slug === current) ? list : [...list];
  return (
    <div class="switcher">
      <label for="project-switcher">Project</label>
      <select
        id="project-switcher"
        value={current}
        onChange={(e) => {
          const slug = e.currentTarget.value;
          const p = list.find((x) => x.slug === slug);
          // Keep the section when the new project's role shows it; else streams.
          const keep = p && (p.role === 'admin' || (section !== 'api-keys' && section !== 'members'));
          navigate(`/p/${encodeURIComponent(slug)}/${keep ? section : 'streams'}`);
        }}
      >
        {!options.some((p) => p.slug === current) && <option value={current}>{current}</option>}
        {options.map((p) => (
          <option key={p._id} value={p.slug}>
            {p.name === p.slug ? p.slug : `${p.name} (${p.slug})`}
          </option>
        ))}
      </select>
    </div>
  );
}

function ProjectPage({ project, path }: { project: Project; path: string }) {
  const slug = project.slug;
  let m: Record<string, string> | null;
  if (path === '/' || path === '') return <Redirect to={`/p/${encodeURIComponent(slug)}/streams`} />;
  if (match('/streams', path)) return <Streams project={project} />;
  if (match('/streams/new', path)) return <StreamNew project={project} />;
  if ((m = match('/streams/:id', path))) return <StreamPage key={m.id} project={project} id={m.id ?? ''} />;
  if (match('/vod', path)) return <VodList project={project} />;
  if ((m = match('/vod/:id', path))) return <VodPage key={m.id} project={project} id={m.id ?? ''} />;
  if (match('/webhooks', path)) return <Webhooks project={project} />;
  if ((m = match('/webhooks/:id', path))) return <WebhookPage key={m.id} project={project} id={m.id ?? ''} />;
  if (match('/api-keys', path)) return <ApiKeys project={project} />;
  if (match('/members', path)) return <Members project={project} />;
  return <Gone what="Page" back={`/p/${encodeURIComponent(slug)}/streams`} backLabel="Go to the streams" />;
}

function Redirect({ to }: { to: string }) {
  useEffect(() => navigate(to, { replace: true }), [to]);
  return null;
}
