// What a user takes away from a VOD (docs/vod.md, Clips and Downloads): its MP4 downloads, and a
// clip of a range of it.
import { useEffect, useState } from 'preact/hooks';

import { api, type Download, type Project, type Vod } from '../../api/client';
import { type ApiError, asApiError, call } from '../../api/errors';
import { Actions, CheckboxField, FormAlert, TextField, useForm } from '../../components/form';
import { ErrorAlert } from '../../components/ui';
import { bytes } from '../../lib/format';
import { navigate } from '../../lib/router';
import { canWrite } from '../../lib/session';

/** How often a VOD whose downloads are being made is read again. */
const POLL_MS = 1000;

const STATUS: Record<string, string> = {
  preparing: 'Being made; they appear here once the VOD is complete and they are ready.',
  ready: 'Ready.',
  failed: 'They could not be made.',
};

/** `mp4` on and off (`PATCH /vod/<id>`), and the links, signed through a ticket when playback is. */
export function VodDownloads({ project, vod, onChanged }: { project: Project; vod: Vod; onChanged: (v: Vod) => void }) {
  const slug = project.slug;
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const [links, setLinks] = useState<Download[]>([]);
  const ready = vod.downloadsStatus === 'ready' && vod.status === 'complete' && !vod.archivedAt;
  useEffect(() => {
    setLinks([]);
    if (!ready) return undefined;
    if (!vod.signedPlayback) {
      setLinks(vod.downloads);
      return undefined;
    }
    let cancelled = false;
    call(api.createVodPlaybackTicket({ path: { slug, id: vod._id }, body: { expiresInSec: 3600 } })).then(
      (t) => !cancelled && setLinks(t.downloads),
      (e: unknown) => !cancelled && setError(asApiError(e)),
    );
    return () => {
      cancelled = true;
    };
  }, [ready, vod.signedPlayback, vod.downloads, vod._id, slug]);
  // No event says they are made: while they are being made for a complete VOD, read it again.
  const making = vod.downloadsStatus === 'preparing' && vod.status === 'complete';
  useEffect(() => {
    if (!making) return undefined;
    const timer = window.setInterval(() => {
      call(api.getVod({ path: { slug, id: vod._id } })).then(onChanged, () => undefined);
    }, POLL_MS);
    return () => window.clearInterval(timer);
  }, [making, slug, vod._id]);
  const offerable = !vod.drmEnabled && !vod.archivedAt && !['failed', 'cancelled'].includes(vod.status);
  if (!offerable && !vod.mp4) return null;
  return (
    <section class="card" aria-labelledby="downloads-title">
      <h2 id="downloads-title">Downloads</h2>
      <ErrorAlert error={error} />
      {canWrite(project) && offerable && (
        <CheckboxField
          id="vod-mp4"
          label="MP4 downloads of each rendition and an M4A"
          checked={vod.mp4}
          onValue={(mp4) => {
            setError(undefined);
            call(api.updateVod({ path: { slug, id: vod._id }, body: { mp4 } })).then(onChanged, (e: unknown) => setError(asApiError(e)));
          }}
        />
      )}
      {vod.downloadsStatus && <p data-testid="downloads-status">{STATUS[vod.downloadsStatus]}</p>}
      {vod.downloadsError && (
        <div class="alert" role="alert">
          <p>{vod.downloadsError}</p>
        </div>
      )}
      {links.length > 0 && (
        <ul class="downloads" data-testid="downloads">
          {links.map((d) => (
            <li key={d.rendition}>
              <a href={d.url} download>
                {d.rendition === 'audio' ? 'Audio (M4A)' : `${d.rendition} (MP4)`}
              </a>{' '}
              {bytes(d.size)}
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

const CLIP_FIELDS = ['name', 'clip.startSec', 'clip.endSec'] as const;

/** Cuts a range of a complete VOD into a VOD of its own (`POST /vod` with `clip`), then opens it. */
export function VodClip({ project, vod }: { project: Project; vod: Vod }) {
  const slug = project.slug;
  const form = useForm(CLIP_FIELDS);
  const [name, setName] = useState(`${vod.name} (clip)`.slice(0, 100));
  const [start, setStart] = useState('0');
  const [end, setEnd] = useState(String(Math.min(60, Math.floor(vod.duration ?? 60))));
  if (!canWrite(project) || vod.status !== 'complete' || vod.archivedAt) return null;
  const submit = (e: Event) => {
    e.preventDefault();
    void form.submit(async () => {
      const clip = { vodId: vod._id, startSec: Number(start), endSec: Number(end) };
      const created = await call(api.createVod({ path: { slug }, body: { name, clip } }));
      navigate(`/p/${encodeURIComponent(slug)}/vod/${encodeURIComponent(created.vod._id)}`);
    });
  };
  return (
    <section class="card" aria-labelledby="clip-title">
      <h2 id="clip-title">Make a clip</h2>
      <p class="hint">No re-encode: the clip starts at the keyframe at or before the start.</p>
      <form onSubmit={submit} noValidate>
        <FormAlert messages={form.errors.general} />
        <TextField id="clip-name" label="Name" value={name} onValue={setName} errors={form.errors.fields.name} maxLength={100} />
        <TextField
          id="clip-start"
          label="Start (seconds)"
          type="number"
          min={0}
          step="0.1"
          value={start}
          onValue={setStart}
          errors={form.errors.fields['clip.startSec']}
        />
        <TextField
          id="clip-end"
          label="End (seconds)"
          type="number"
          min={0}
          step="0.1"
          value={end}
          onValue={setEnd}
          errors={form.errors.fields['clip.endSec']}
        />
        <Actions>
          <button type="submit" disabled={form.busy} data-testid="clip-submit">
            Make the clip
          </button>
        </Actions>
      </form>
    </section>
  );
}
