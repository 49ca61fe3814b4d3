// A clip of the live DVR window (docs/vod.md, Clips): the last N seconds, by the instants the
// playlists' EXT-X-PROGRAM-DATE-TIME use, cut without a re-encode into a VOD of its own.
import { useState } from 'preact/hooks';

import { api, type Project, type Stream } from '../../api/client';
import { Actions, FormAlert, TextField, useForm } from '../../components/form';
import { call } from '../../api/errors';
import { serverNow } from '../../lib/clock';
import { navigate } from '../../lib/router';
import { canWrite } from '../../lib/session';

const FIELDS = ['name', 'seconds', 'clip.start', 'clip.end'] as const;
/** How far behind now the clip ends: the DVR window holds closed segments only. */
const BEHIND_MS = 8000;

export function StreamClip({ project, stream }: { project: Project; stream: Stream }) {
  const slug = project.slug;
  const form = useForm(FIELDS);
  const [name, setName] = useState(`${stream.name} (clip)`.slice(0, 100));
  const [length, setLength] = useState('30');
  if (!canWrite(project) || !stream.dvrEnabled || stream.status !== 'live') return null;
  const submit = (e: Event) => {
    e.preventDefault();
    void form.submit(async () => {
      const end = serverNow() - BEHIND_MS;
      const start = end - Number(length) * 1000;
      const clip = { streamId: stream._id, start: new Date(start).toISOString(), end: new Date(end).toISOString() };
      const created = await call(api.createVod({ path: { slug }, body: { name, clip } }));
      navigate(`/p/${encodeURIComponent(slug)}/vod/${encodeURIComponent(created.vod._id)}`);
    });
  };
  return (
    <section class="card" aria-labelledby="stream-clip-title">
      <h2 id="stream-clip-title">Clip the DVR window</h2>
      <p class="hint">The last seconds up to {BEHIND_MS / 1000} s ago become a VOD, without a re-encode.</p>
      <form onSubmit={submit} noValidate>
        <FormAlert messages={[...form.errors.general, ...(form.errors.fields['clip.start'] ?? []), ...(form.errors.fields['clip.end'] ?? [])]} />
        <TextField id="stream-clip-name" label="Name" value={name} onValue={setName} errors={form.errors.fields.name} maxLength={100} />
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
        <Actions>
          <button type="submit" disabled={form.busy} data-testid="stream-clip-submit">
            Make the clip
          </button>
        </Actions>
      </form>
    </section>
  );
}
