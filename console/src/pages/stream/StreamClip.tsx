// A clip of the live DVR window (docs/vod.md, Clips), cut without a re-encode into a VOD of its
// own: between two instants marked on the preview (scrubbed back into the DVR window), or the
// last N seconds. Instants are the playlists' EXT-X-PROGRAM-DATE-TIME.
import { useState } from 'preact/hooks';

import { api, type Project, type Stream } from '../../api/client';
import { call } from '../../api/errors';
import { Actions, FormAlert, TextField, useForm } from '../../components/form';
import { serverNow } from '../../lib/clock';
import { dateTime } from '../../lib/format';
import { navigate } from '../../lib/router';
import { canWrite } from '../../lib/session';
import type { Playback } from '../../preview/Player';

const FIELDS = ['name', 'seconds', 'clip.start', 'clip.end'] as const;
/** How far behind now "the last N seconds" end: the DVR window holds closed segments only. */
const BEHIND_MS = 8000;

export function StreamClip({ project, stream, preview }: { project: Project; stream: Stream; preview: Playback | null }) {
  const slug = project.slug;
  const form = useForm(FIELDS);
  const [name, setName] = useState(`${stream.name} (clip)`.slice(0, 100));
  const [length, setLength] = useState('30');
  const [marks, setMarks] = useState<{ start: number | null; end: number | null }>({ start: null, end: null });
  if (!canWrite(project) || !stream.dvrEnabled || stream.status !== 'live') return null;
  const position = () => preview?.playingDate?.() ?? null;
  const canMark = !!preview?.playingDate;
  const mark = (which: 'start' | 'end') => {
    const at = position();
    if (at !== null) setMarks((m) => ({ ...m, [which]: at }));
  };
  const marked = marks.start !== null && marks.end !== null;
  const submit = (e: Event) => {
    e.preventDefault();
    void form.submit(async () => {
      const end = marked ? (marks.end ?? 0) : serverNow() - BEHIND_MS;
      const start = marked ? (marks.start ?? 0) : end - Number(length) * 1000;
      const clip = { streamId: stream._id, start: new Date(start).toISOString(), end: new Date(end).toISOString() };
      const created = await call(api.createVod({ path: { slug }, body: { name, clip } }));
      navigate(`/p/${encodeURIComponent(slug)}/vod/${encodeURIComponent(created.vod._id)}`);
    });
  };
  const when = (t: number | null) => (t === null ? 'not marked' : dateTime(new Date(t).toISOString()));
  return (
    <section class="card" aria-labelledby="stream-clip-title">
      <h2 id="stream-clip-title">Clip the DVR window</h2>
      <p class="hint">
        {canMark
          ? 'Scrub the preview back, mark the start and the end, then make the clip (the end must be in a finished segment: a few seconds behind live). Unmarked, the clip is the last seconds up to 8 s ago.'
          : `The last seconds up to ${BEHIND_MS / 1000} s ago become a VOD, without a re-encode.`}
      </p>
      <form onSubmit={submit} noValidate>
        <FormAlert messages={[...form.errors.general, ...(form.errors.fields['clip.start'] ?? []), ...(form.errors.fields['clip.end'] ?? [])]} />
        <TextField id="stream-clip-name" label="Name" value={name} onValue={setName} errors={form.errors.fields.name} maxLength={100} />
        {canMark && (
          <div class="row-actions">
            <button type="button" onClick={() => mark('start')} data-testid="stream-clip-mark-start">
              Mark the start here
            </button>
            <button type="button" onClick={() => mark('end')} data-testid="stream-clip-mark-end">
              Mark the end here
            </button>
            <p data-testid="stream-clip-marks">
              From {when(marks.start)} to {when(marks.end)}
            </p>
          </div>
        )}
        {!marked && (
          <TextField
            id="stream-clip-seconds"
            label="Seconds"
            type="number"
            min={1}
            max={stream.dvrDuration}
            value={length}
            onValue={setLength}
            errors={form.errors.fields.seconds}
          />
        )}
        <Actions>
          <button type="submit" disabled={form.busy} data-testid="stream-clip-submit">
            Make the clip
          </button>
        </Actions>
      </form>
    </section>
  );
}
