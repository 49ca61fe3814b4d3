import { useEffect, useState } from 'preact/hooks';

import { api, type Project, type Slate, type Stream } from '../../api/client';
import { ApiError, asApiError, call } from '../../api/errors';
import { ErrorAlert } from '../../components/ui';
import { dateTime } from '../../lib/format';
import { canWrite } from '../../lib/session';

/** The largest picture the server takes (it checks again, with the reason). */
const MAX_BYTES = 2 * 1024 * 1024;

/**
 * The slate: what viewers see while no input feeds a live stream, within its reconnect window
 * (CONTRACT: Continuity). The default is a dark card; a member may replace it with a JPEG or PNG
 * (at most 2 MiB and 4096 pixels a side, checked by the server) or restore the card. A picture set
 * while the slate is on shows from the next time it comes on.
 */
export function StreamSlate({ project, stream }: { project: Project; stream: Stream }) {
  const path = { slug: project.slug, id: stream._id };
  // undefined: loading; null: the default card (the API answers 404).
  const [slate, setSlate] = useState<Slate | null | undefined>(undefined);
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    call(api.getStreamSlate({ path })).then(
      (s) => setSlate(s),
      (e: unknown) => {
        const err = asApiError(e);
        if (err.status === 404) setSlate(null);
        else setError(err);
      },
    );
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [project.slug, stream._id]);

  const run = async (action: () => Promise<Slate | null>) => {
    setBusy(true);
    setError(undefined);
    try {
      setSlate(await action());
    } catch (e) {
      setError(asApiError(e));
    } finally {
      setBusy(false);
    }
  };
  const upload = (file: File | undefined) => {
    if (!file) return;
    if (file.type !== 'image/jpeg' && file.type !== 'image/png') {
      setError(new ApiError(415, ['Choose a JPEG or PNG picture.']));
      return;
    }
    if (file.size > MAX_BYTES) {
      setError(new ApiError(413, ['The picture is larger than 2 MiB.']));
      return;
    }
    void run(() => call(api.putStreamSlate({ path, body: file, headers: { 'Content-Type': file.type } })));
  };
  const writable = canWrite(project) && stream.status !== 'disabled';

  return (
    <section class="card" aria-labelledby="slate-title">
      <h2 id="slate-title">Slate</h2>
      <p class="hint">
        What viewers see while no input feeds the live stream (the publisher away within the reconnect window, and no
        backup standing by).
      </p>
      <ErrorAlert error={error} />
      <p data-testid="stream-slate">
        {slate === undefined
          ? 'Loading…'
          : slate === null
            ? 'The default card (“The stream will resume shortly”).'
            : `Your picture: ${slate.contentType === 'image/png' ? 'PNG' : 'JPEG'}, ${slate.width}×${slate.height}, set ${dateTime(slate.updatedAt)}.`}
      </p>
      {writable && (
        <div class="actions wrap">
          <label for="slate-file" class="button">
            {slate ? 'Replace the picture…' : 'Use a picture…'}
          </label>
          <input
            id="slate-file"
            class="file-input"
            type="file"
            accept="image/jpeg,image/png"
            disabled={busy}
            data-testid="slate-file"
            onChange={(e) => {
              upload(e.currentTarget.files?.[0]);
              e.currentTarget.value = '';
            }}
          />
          {slate && (
            <button
              type="button"
              disabled={busy}
              data-testid="slate-restore"
              onClick={() => run(() => call(api.deleteStreamSlate({ path })).then(() => null))}
            >
              Restore the default card
            </button>
          )}
        </div>
      )}
    </section>
  );
}
