import { useEffect, useState } from 'preact/hooks';

import { api, type Project, type Stream, type StreamWithCredentials } from '../api/client';
import { type ApiError, asApiError, call } from '../api/errors';
import { ErrorAlert, Gone, Loading, PageHeading, Status } from '../components/ui';
import { isStreamEvent, useLiveFallback, useProjectEvents } from '../events';
import { useAsync } from '../lib/async';
import { takeOver } from '../lib/credentials';
import { dateTime } from '../lib/format';
import { Link } from '../lib/router';
import { canWrite } from '../lib/session';
import { StreamActions } from './stream/StreamActions';
import { StreamClip } from './stream/StreamClip';
import type { Playback } from '../preview/Player';
import { StreamConnect } from './stream/StreamConnect';
import { StreamHealth } from './stream/StreamHealth';
import { StreamPreview } from './stream/StreamPreview';
import { StreamRecordings } from './stream/StreamRecordings';
import { StreamSimulcast } from './stream/StreamSimulcast';
import { StreamSlate } from './stream/StreamSlate';
import { StreamTicket } from './stream/StreamTicket';

/** How often a live stream's record is re-read for its input health (bitrate moves all the time). */
const HEALTH_POLL_MS = 5000;

export function StreamPage({ project, id }: { project: Project; id: string }) {
  const slug = project.slug;
  const base = `/p/${encodeURIComponent(slug)}/streams`;
  // The push password exists only in the create and rotate answers: kept here, in memory, for
  // as long as this page is open.
  const [creds, setCreds] = useState<StreamWithCredentials | undefined>(() => takeOver(id));
  const [actionError, setActionError] = useState<ApiError | undefined>(undefined);
  // The preview's playback: its position marks a clip of the DVR window.
  const [preview, setPreview] = useState<Playback | null>(null);
  const stream = useAsync<Stream>(() => call(api.getStream({ path: { slug, id } })), [slug, id]);

  const reread = () => {
    call(api.getStream({ path: { slug, id } })).then(
      (s) => stream.setData(() => s),
      (e: unknown) => {
        const err = asApiError(e);
        if (err.gone) stream.reload(); // shows the gone state
        else setActionError(err);
      },
    );
  };
  useProjectEvents(slug, (m) => {
    if (m === 'resync' || (isStreamEvent(m) && m.data.id === id)) reread();
  });
  const live = stream.data?.status === 'live';
  useLiveFallback(slug, () => document.visibilityState === 'visible' && reread(), true);
  useEffect(() => {
    if (!live) return undefined;
    const t = window.setInterval(() => document.visibilityState === 'visible' && reread(), HEALTH_POLL_MS);
    return () => window.clearInterval(t);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [live, slug, id]);

  if (stream.error?.gone) return <Gone what="Stream" back={base} backLabel="Back to the streams" />;
  if (!stream.data) {
    return stream.error ? <ErrorAlert error={stream.error} onRetry={stream.reload} /> : <Loading what="the stream" />;
  }
  const s = stream.data;
  const deleted = s.status === 'disabled' && s.disabledReason === 'deleted';
  const onChanged = (next: Stream | StreamWithCredentials) => {
    stream.setData(() => next);
    if ('pushPassword' in next) setCreds(next);
  };

  return (
    <article>
      <p class="crumbs">
        <Link href={base}>Streams</Link>
      </p>
      <PageHeading title={s.name}>
        <span class="status-line">
          Status: <Status value={s.status} testid="stream-status" />
          {s.disabledReason && <span class="reason"> ({s.disabledReason.replace(/_/g, ' ')})</span>}
        </span>
      </PageHeading>
      {deleted && (
        <div class="alert" role="status">
          <p>This stream was deleted. It accepts no pushes and no changes.</p>
        </div>
      )}
      <ErrorAlert error={actionError} />
      <div class="columns">
        <div>
          <StreamPreview project={project} stream={s} onPlayback={setPreview} />
          <StreamHealth stream={s} />
        </div>
        <div>
          <StreamConnect stream={s} creds={creds?._id === s._id ? creds : undefined} />
        </div>
      </div>
      {canWrite(project) && !deleted && (
        <StreamActions project={project} stream={s} onChanged={onChanged} onError={setActionError} />
      )}
      <StreamTicket project={project} stream={s} />
      {!deleted && <StreamClip project={project} stream={s} preview={preview} />}
      {!deleted && <StreamSlate project={project} stream={s} />}
      {!deleted && <StreamSimulcast project={project} stream={s} />}
      <section class="card" aria-labelledby="settings-title">
        <h2 id="settings-title">Settings</h2>
        <dl class="facts">
          <dt>Qualities</dt>
          <dd>{s.qualities.join(', ')}</dd>
          <dt>Protocols</dt>
          <dd>{s.protocols.join(', ')}</dd>
          <dt>Recording</dt>
          <dd>{s.vodEnabled ? 'each session becomes a VOD' : 'off'}</dd>
          <dt>DVR</dt>
          <dd>{s.dvrEnabled ? `on, ${s.dvrDuration} s` : 'off'}</dd>
          <dt>Reconnect window</dt>
          <dd>{s.reconnectWindow} s</dd>
          <dt>DRM (AES-128)</dt>
          <dd>{s.drmEnabled ? 'on' : 'off'}</dd>
          <dt>Signed playback</dt>
          <dd>{s.signedPlayback ? 'on' : 'off'}</dd>
          <dt>Created</dt>
          <dd>{dateTime(s.createdAt)}</dd>
          <dt>Last push</dt>
          <dd>{dateTime(s.lastPushAt)}</dd>
        </dl>
      </section>
      <StreamRecordings project={project} streamId={s._id} />
    </article>
  );
}
