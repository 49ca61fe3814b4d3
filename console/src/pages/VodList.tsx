import { useEffect, useRef, useState } from 'preact/hooks';

import { api, type Project, type Vod, type VodStatus } from '../api/client';
import { call } from '../api/errors';
import { CheckboxField, SelectField } from '../components/form';
import { ErrorAlert, Loading, PageHeading, Pager, Status, TableWrap } from '../components/ui';
import { isVodEvent, useLiveFallback, useProjectEvents } from '../events';
import { useAsync } from '../lib/async';
import { VOD_STATUSES } from '../lib/catalog';
import { bytes, dateTime, seconds } from '../lib/format';
import { Link, setQuery, useLocation } from '../lib/router';
import { canWrite } from '../lib/session';
import { useStore } from '../lib/store';
import { startUpload, uploads } from '../lib/upload';
import { PAGE } from './Streams';
import { UploadTray } from './UploadTray';
import { VodRowActions } from './vod/VodActions';

const STATUS_OPTIONS: readonly { value: VodStatus | ''; label: string }[] = [
  { value: '', label: 'Any status' },
  ...VOD_STATUSES.map((s) => ({ value: s, label: s.replace(/_/g, ' ') })),
];

export const MOVING: readonly VodStatus[] = ['pending_upload', 'uploaded', 'queued', 'processing'];

export function VodList({ project }: { project: Project }) {
  const slug = project.slug;
  const query = useLocation().query;
  const status = (query.get('status') ?? '') as VodStatus | '';
  const archived = query.get('archived') === 'true';
  const skip = Math.max(0, Number(query.get('skip') ?? 0) || 0);
  const list = useAsync(
    () =>
      call(
        api.listVods({
          path: { slug },
          query: { skip, limit: PAGE, ...(status ? { status } : {}), ...(archived ? { archived: true } : {}) },
        }),
      ),
    [slug, status, archived, skip],
  );

  const pendingReload = useRef<number | undefined>(undefined);
  const reloadSoon = () => {
    window.clearTimeout(pendingReload.current);
    pendingReload.current = window.setTimeout(() => list.reload(), 250);
  };
  useEffect(() => () => window.clearTimeout(pendingReload.current), []);
  const replace = (v: Vod) => list.setData((old) => old && { ...old, items: old.items.map((r) => (r._id === v._id ? v : r)) });

  useProjectEvents(slug, (m) => {
    if (m === 'resync') return reloadSoon();
    if (!isVodEvent(m)) return undefined;
    if (!list.data?.items.some((r) => r._id === m.data.id)) return reloadSoon();
    call(api.getVod({ path: { slug, id: m.data.id } })).then(replace, () => reloadSoon());
    return undefined;
  });

  // A VOD created by an upload of this tab shows up at once, and its row follows the upload.
  const mine = useStore(uploads).filter((u) => u.slug === slug);
  const known = mine.map((u) => `${u.vodId ?? ''}:${u.state}`).join(',');
  useEffect(() => {
    if (mine.some((u) => u.vodId)) reloadSoon();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [known]);

  const moving = list.data?.items.some((v) => MOVING.includes(v.status)) ?? false;
  useLiveFallback(slug, () => document.visibilityState === 'visible' && list.reload(), moving);

  return (
    <section>
      <PageHeading title="VOD" />
      {canWrite(project) && <DropZone slug={slug} />}
      <UploadTray inPage />
      <form noValidate class="filters" onSubmit={(e) => e.preventDefault()}>
        <SelectField id="vod-status-filter" label="Status" value={status} options={STATUS_OPTIONS} onValue={(v) => setQuery({ status: v || null, skip: null })} />
        <CheckboxField id="vod-archived" label="Show archived" checked={archived} onValue={(v) => setQuery({ archived: v ? 'true' : null, skip: null })} />
      </form>
      <ErrorAlert error={list.error} onRetry={list.reload} />
      {!list.data && !list.error && <Loading what="VODs" />}
      {list.data && (
        <>
          {list.data.items.length === 0 ? (
            <p class="empty">{status || archived ? 'No VOD matches these filters.' : 'No VODs yet.'}</p>
          ) : (
            <TableWrap label="VODs">
              <table class="stack">
                <caption class="sr-only">VODs</caption>
                <thead>
                  <tr>
                    <th scope="col">Name</th>
                    <th scope="col">Status</th>
                    <th scope="col">Duration</th>
                    <th scope="col">Source size</th>
                    <th scope="col">Created</th>
                    {canWrite(project) && <th scope="col">Actions</th>}
                  </tr>
                </thead>
                <tbody>
                  {list.data.items.map((v) => (
                    <tr key={v._id} data-testid="vod-row" data-id={v._id}>
                      <td data-label="Name">
                        <Link href={`/p/${encodeURIComponent(slug)}/vod/${encodeURIComponent(v._id)}`}>{v.name}</Link>
                        {v.streamId && <span class="hint"> (recording)</span>}
                      </td>
                      <td data-label="Status">
                        <Status value={v.status} testid="vod-status" />
                        {v.status === 'processing' && <span class="hint"> {v.progress}%</span>}
                      </td>
                      <td data-label="Duration">{seconds(v.duration)}</td>
                      <td data-label="Source size">{bytes(v.sourceSize)}</td>
                      <td data-label="Created">{dateTime(v.createdAt)}</td>
                      {canWrite(project) && (
                        <td data-label="Actions">
                          <VodRowActions project={project} vod={v} onChanged={replace} />
                        </td>
                      )}
                    </tr>
                  ))}
                </tbody>
              </table>
            </TableWrap>
          )}
          <Pager skip={skip} limit={PAGE} total={list.data.total} what="VODs" onPage={(s) => setQuery({ skip: s || null })} />
        </>
      )}
    </section>
  );
}

/** Drop files here, or pick them: each file starts uploading at once, as a VOD named after it. */
function DropZone({ slug }: { slug: string }) {
  const [over, setOver] = useState(false);
  const start = (files: FileList | null) => {
    for (const f of Array.from(files ?? [])) startUpload(slug, f);
  };
  return (
    <div
      class={`dropzone${over ? ' over' : ''}`}
      onDragEnter={(e) => (e.preventDefault(), setOver(true))}
      onDragOver={(e) => {
        e.preventDefault();
        if (e.dataTransfer) e.dataTransfer.dropEffect = 'copy';
      }}
      onDragLeave={(e) => {
        if (e.currentTarget === e.target) setOver(false);
      }}
      onDrop={(e) => {
        e.preventDefault();
        setOver(false);
        start(e.dataTransfer?.files ?? null);
      }}
    >
      <p>Drop video files here to upload them, or</p>
      <label for="vod-file" class="button primary">
        Choose files…
      </label>
      <input
        id="vod-file"
        class="file-input"
        type="file"
        accept="video/*,.mkv,.mov,.mp4,.ts,.webm"
        multiple
        data-testid="vod-file"
        onChange={(e) => {
          start(e.currentTarget.files);
          e.currentTarget.value = '';
        }}
      />
    </div>
  );
}
