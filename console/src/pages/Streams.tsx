import { useEffect, useRef, useState } from 'preact/hooks';

import { api, type Project, type Stream, type StreamListItem, type StreamStatus } from '../api/client';
import { call } from '../api/errors';
import { SelectField } from '../components/form';
import { ErrorAlert, Loading, PageHeading, Pager, Status, TableWrap } from '../components/ui';
import { isStreamEvent, useLiveFallback, useProjectEvents } from '../events';
import { useAsync } from '../lib/async';
import { dateTime } from '../lib/format';
import { Link, setQuery, useLocation } from '../lib/router';
import { canWrite } from '../lib/session';

/** Rows per page; the list never renders more than one page. */
export const PAGE = 50;

const STATUSES: readonly { value: StreamStatus | ''; label: string }[] = [
  { value: '', label: 'Any status' },
  { value: 'live', label: 'Live' },
  { value: 'idle', label: 'Idle' },
  { value: 'pending', label: 'Pending' },
  { value: 'disabled', label: 'Disabled' },
];

const toRow = (s: Stream): StreamListItem => ({
  _id: s._id,
  name: s.name,
  status: s.status,
  streamKey: s.streamKey,
  vodEnabled: s.vodEnabled,
  createdAt: s.createdAt,
  viewers: s.viewers,
  viewerCounts: s.viewerCounts,
  peakViewers: s.peakViewers,
});

/** How often the list is re-read while a stream on it is live (its viewer counts move). */
const LIVE_POLL_MS = 5000;

export function Streams({ project }: { project: Project }) {
  const slug = project.slug;
  const query = useLocation().query;
  const q = query.get('q') ?? '';
  const status = (query.get('status') ?? '') as StreamStatus | '';
  const skip = Math.max(0, Number(query.get('skip') ?? 0) || 0);
  const [search, setSearch] = useState(q);

  const list = useAsync(
    () =>
      call(
        api.listStreams({
          path: { slug },
          query: { skip, limit: PAGE, ...(q ? { q } : {}), ...(status ? { status } : {}) },
        }),
      ),
    [slug, q, status, skip],
  );

  // Typing searches after a short pause; the URL keeps the filters (back button, shareable).
  useEffect(() => {
    if (search === q) return undefined;
    const t = window.setTimeout(() => setQuery({ q: search.trim() || null, skip: null }), 300);
    return () => window.clearTimeout(t);
  }, [search, q]);

  // Live statuses: re-read the stream an event names; anything not on this page reloads the page.
  const pendingReload = useRef<number | undefined>(undefined);
  const reloadSoon = () => {
    window.clearTimeout(pendingReload.current);
    pendingReload.current = window.setTimeout(() => list.reload(), 250);
  };
  useEffect(() => () => window.clearTimeout(pendingReload.current), []);
  useProjectEvents(slug, (m) => {
    if (m === 'resync') return reloadSoon();
    if (!isStreamEvent(m)) return undefined;
    const shown = list.data?.items.some((r) => r._id === m.data.id);
    if (!shown) return reloadSoon();
    call(api.getStream({ path: { slug, id: m.data.id } })).then(
      (s) => list.setData((old) => old && { ...old, items: old.items.map((r) => (r._id === s._id ? toRow(s) : r)) }),
      () => reloadSoon(),
    );
    return undefined;
  });
  useLiveFallback(slug, () => document.visibilityState === 'visible' && list.reload(), true);
  const anyLive = list.data?.items.some((r) => r.status === 'live') ?? false;
  useEffect(() => {
    if (!anyLive) return undefined;
    const t = window.setInterval(() => document.visibilityState === 'visible' && list.reload(), LIVE_POLL_MS);
    return () => window.clearInterval(t);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [anyLive, slug, q, status, skip]);

  const base = `/p/${encodeURIComponent(slug)}/streams`;
  return (
    <section>
      <PageHeading title="Streams">
        {canWrite(project) && (
          <Link class="button primary" href={`${base}/new`} data-testid="stream-new">
            New stream
          </Link>
        )}
      </PageHeading>
      <form noValidate class="filters" role="search" onSubmit={(e) => (e.preventDefault(), setQuery({ q: search.trim() || null, skip: null }))}>
        <div class="field">
          <label for="stream-search">Search by name</label>
          <input id="stream-search" type="search" value={search} onInput={(e) => setSearch(e.currentTarget.value)} />
        </div>
        <SelectField
          id="stream-status-filter"
          label="Status"
          value={status}
          options={STATUSES}
          onValue={(v) => setQuery({ status: v || null, skip: null })}
        />
      </form>
      <ErrorAlert error={list.error} onRetry={list.reload} />
      {!list.data && !list.error && <Loading what="streams" />}
      {list.data && (
        <>
          {list.data.items.length === 0 ? (
            <p class="empty">
              {q || status ? 'No stream matches these filters.' : 'No streams yet.'}
              {canWrite(project) && !q && !status && (
                <>
                  {' '}
                  <Link href={`${base}/new`}>Create the first one</Link>.
                </>
              )}
            </p>
          ) : (
            <TableWrap label="Streams">
              <table class="stack">
                <caption class="sr-only">Streams</caption>
                <thead>
                  <tr>
                    <th scope="col">Name</th>
                    <th scope="col">Status</th>
                    <th scope="col">Stream key</th>
                    <th scope="col">Viewers</th>
                    <th scope="col">Recording</th>
                    <th scope="col">Created</th>
                  </tr>
                </thead>
                <tbody>
                  {list.data.items.map((s) => (
                    <tr key={s._id} data-testid="stream-row" data-id={s._id}>
                      <td data-label="Name">
                        <Link href={`${base}/${encodeURIComponent(s._id)}`}>{s.name}</Link>
                      </td>
                      <td data-label="Status">
                        <Status value={s.status} testid="stream-status" />
                      </td>
                      <td data-label="Stream key" class="mono">{s.streamKey}</td>
                      <td data-label="Viewers" data-testid="stream-viewers">
                        {s.status === 'live' ? s.viewers : '—'}
                        {s.peakViewers > 0 && <span class="muted"> (peak {s.peakViewers})</span>}
                      </td>
                      <td data-label="Recording">{s.vodEnabled ? 'On' : 'Off'}</td>
                      <td data-label="Created">{dateTime(s.createdAt)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </TableWrap>
          )}
          <Pager skip={skip} limit={PAGE} total={list.data.total} what="streams" onPage={(s) => setQuery({ skip: s || null })} />
        </>
      )}
    </section>
  );
}
