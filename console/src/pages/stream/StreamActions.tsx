import { api, type Project, type Stream, type StreamWithCredentials } from '../../api/client';
import { type ApiError, asApiError, call } from '../../api/errors';
import { CheckboxField } from '../../components/form';
import { ConfirmButton } from '../../components/ui';
import { useState } from 'preact/hooks';

/** What a member or admin can do to a stream. Only rendered for them (a viewer sees none of it). */
export function StreamActions({
  project,
  stream,
  onChanged,
  onError,
}: {
  project: Project;
  stream: Stream;
  onChanged: (s: Stream | StreamWithCredentials) => void;
  onError: (e: ApiError | undefined) => void;
}) {
  const path = { slug: project.slug, id: stream._id };
  const [busy, setBusy] = useState(false);
  const run = async (action: () => Promise<Stream | StreamWithCredentials>) => {
    setBusy(true);
    onError(undefined);
    try {
      onChanged(await action());
    } catch (e) {
      onError(asApiError(e));
    } finally {
      setBusy(false);
    }
  };
  const disabled = stream.status === 'disabled';

  return (
    <section class="card" aria-labelledby="actions-title">
      <h2 id="actions-title">Manage</h2>
      <div class="actions wrap">
        {disabled ? (
          <button type="button" disabled={busy} onClick={() => run(() => call(api.updateStream({ path, body: { enabled: true } })))}>
            Enable stream
          </button>
        ) : (
          <ConfirmButton
            label="Disable stream"
            question={stream.status === 'live' ? 'This ends the live session now. Disable?' : 'Disable this stream?'}
            confirmLabel="Disable"
            onConfirm={() => run(() => call(api.updateStream({ path, body: { enabled: false } })))}
          />
        )}
        <ConfirmButton
          label="Rotate push credentials"
          question="The current username and password stop working at the next connect. Rotate?"
          confirmLabel="Rotate"
          onConfirm={() => run(() => call(api.rotateStreamPush({ path })))}
        />
        <ConfirmButton
          label="Delete stream"
          question={`Delete “${stream.name}”? Live sessions end and the stream cannot be used again.`}
          confirmLabel="Delete"
          danger
          onConfirm={() => run(() => call(api.deleteStream({ path })))}
        />
      </div>
      <CheckboxField
        id="signed-playback"
        label="Signed playback (viewers need a URL from a playback ticket)"
        checked={stream.signedPlayback}
        disabled={busy}
        onValue={(enabled) => run(() => call(api.setStreamSignedPlayback({ path, body: { enabled } })))}
      />
    </section>
  );
}
