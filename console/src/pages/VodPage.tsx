import { useEffect, useState } from 'preact/hooks';

import { api, type Project, type Vod } from '../api/client';
import { type ApiError, asApiError, call } from '../api/errors';
import { CheckboxField } from '../components/form';
import { CopyField, ErrorAlert, Gone, Loading, PageHeading, Status, TableWrap } from '../components/ui';
import { isVodEvent, useLiveFallback, useProjectEvents } from '../events';
import { useAsync } from '../lib/async';
import { bytes, dateTime, seconds } from '../lib/format';
import { Link } from '../lib/router';
import { canWrite } from '../lib/session';
import { Player } from '../preview/Player';
import { MOVING } from './VodList';
import { VodRowActions } from './vod/VodActions';
import { VodClip, VodDownloads } from './vod/VodTakeaway';

export function VodPage({ project, id }: { project: Project; id: string }) {
  const slug = project.slug;
  const base = `/p/${encodeURIComponent(slug)}/vod`;
  const vod = useAsync<Vod>(() => call(api.getVod({ path: { slug, id } })), [slug, id]);
  const [actionError, setActionError] = useState<ApiError | undefined>(undefined);
  const reread = () =>
    call(api.getVod({ path: { slug, id } })).then(
      (v) => vod.setData(() => v),
      (e: unknown) => (asApiError(e).gone ? vod.reload() : setActionError(asApiError(e))),
    );
  useProjectEvents(slug, (m) => {
    if (m === 'resync' || (isVodEvent(m) && m.data.id === id)) void reread();
  });
  const moving = vod.data ? MOVING.includes(vod.data.status) : false;
  useLiveFallback(slug, () => document.visibilityState === 'visible' && void reread(), moving);

  if (vod.error?.gone) return <Gone what="VOD" back={base} backLabel="Back to the VODs" />;
  if (!vod.data) return vod.error ? <ErrorAlert error={vod.error} onRetry={vod.reload} /> : <Loading what="the VOD" />;
  const v = vod.data;

  return (
    <article>
      <p class="crumbs">
        <Link href={base}>VOD</Link>
      </p>
      <PageHeading title={v.name}>
        <span class="status-line">
          Status: <Status value={v.status} testid="vod-status" />
          {v.status === 'processing' && <span> ({v.progress}%)</span>}
          {v.archivedAt && <span> (archived {dateTime(v.archivedAt)})</span>}
        </span>
      </PageHeading>
      <ErrorAlert error={actionError} />
      {v.error && (
        <div class="alert" role="alert">
          <p>{v.error}</p>
        </div>
      )}
      <div class="columns">
        <div>
          <VodPlayer project={project} vod={v} />
        </div>
        <section class="card" aria-labelledby="vod-facts">
          <h2 id="vod-facts">Details</h2>
          <dl class="facts">
            <dt>File</dt>
            <dd>{v.filename}</dd>
            <dt>Source size</dt>
            <dd>{bytes(v.sourceSize)}</dd>
            <dt>Duration</dt>
            <dd>{seconds(v.duration)}</dd>
            <dt>Created</dt>
            <dd>{dateTime(v.createdAt)}</dd>
            <dt>Completed</dt>
            <dd>{dateTime(v.completedAt)}</dd>
            <dt>Encryption</dt>
            <dd>{v.drmEnabled ? 'AES-128' : 'none'}</dd>
            <dt>Views</dt>
            <dd data-testid="vod-views">
              {v.views}, {seconds(v.watchSeconds)} watched
            </dd>
            {v.peakViewers != null && (
              <>
                <dt>Live peak</dt>
                <dd>{v.peakViewers} viewers at once</dd>
              </>
            )}
            {v.clipOf && (
              <>
                <dt>Clip of</dt>
                <dd>
                  {'vodId' in v.clipOf ? (
                    <Link href={`${base}/${encodeURIComponent(v.clipOf.vodId)}`}>
                      a VOD, {seconds(v.clipOf.startSec)} to {seconds(v.clipOf.endSec)}
                    </Link>
                  ) : (
                    <Link href={`/p/${encodeURIComponent(slug)}/streams/${encodeURIComponent(v.clipOf.streamId)}`}>
                      a live stream, {dateTime(v.clipOf.start)} to {dateTime(v.clipOf.end)}
                    </Link>
                  )}
                </dd>
              </>
            )}
            {v.streamId && (
              <>
                <dt>Recorded from</dt>
                <dd>
                  <Link href={`/p/${encodeURIComponent(slug)}/streams/${encodeURIComponent(v.streamId)}`}>the stream</Link>
                </dd>
              </>
            )}
          </dl>
          {v.playbackUrl && <CopyField label="Playback URL" value={v.playbackUrl} />}
          {canWrite(project) && (
            <>
              <CheckboxField
                id="vod-signed"
                label="Signed playback"
                checked={v.signedPlayback}
                onValue={(enabled) => {
                  setActionError(undefined);
                  call(api.setVodSignedPlayback({ path: { slug, id }, body: { enabled } })).then(
                    (next) => vod.setData(() => next),
                    (e: unknown) => setActionError(asApiError(e)),
                  );
                }}
              />
              <VodRowActions project={project} vod={v} onChanged={(next) => vod.setData(() => next)} />
            </>
          )}
        </section>
      </div>
      <VodDownloads project={project} vod={v} onChanged={(next) => vod.setData(() => next)} />
      <VodClip project={project} vod={v} />
      {v.renditions.length > 0 && (
        <section class="card" aria-labelledby="renditions-title">
          <h2 id="renditions-title">Renditions</h2>
          <TableWrap label="Renditions">
            <table class="stack">
              <caption class="sr-only">Renditions produced</caption>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Size</th>
                  <th scope="col">Asked bitrate</th>
                  <th scope="col">Average</th>
                  <th scope="col">Peak</th>
                </tr>
              </thead>
              <tbody>
                {v.renditions.map((r) => (
                  <tr key={r.name}>
                    <td data-label="Name">{r.name}</td>
                    <td data-label="Size">
                      {r.width}×{r.height}
                    </td>
                    <td data-label="Asked bitrate">{r.videoBitrate}</td>
                    <td data-label="Average">{Math.round(r.averageBandwidth / 1000)} kbit/s</td>
                    <td data-label="Peak">{Math.round(r.peakBandwidth / 1000)} kbit/s</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </TableWrap>
        </section>
      )}
    </article>
  );
}

/** The player and thumbnail of a complete VOD (through a ticket when playback is signed). */
function VodPlayer({ project, vod }: { project: Project; vod: Vod }) {
  const [urls, setUrls] = useState<{ playbackUrl: string; thumbnailUrl: string | null } | null>(null);
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const complete = vod.status === 'complete' && !vod.archivedAt;
  useEffect(() => {
    setUrls(null);
    setError(undefined);
    if (!complete) return undefined;
    if (!vod.signedPlayback) {
      if (vod.playbackUrl) setUrls({ playbackUrl: vod.playbackUrl, thumbnailUrl: vod.thumbnailUrl });
      return undefined;
    }
    let cancelled = false;
    call(api.createVodPlaybackTicket({ path: { slug: project.slug, id: vod._id }, body: { expiresInSec: 3600 } })).then(
      (t) => !cancelled && setUrls({ playbackUrl: t.playbackUrl, thumbnailUrl: t.thumbnailUrl }),
      (e: unknown) => !cancelled && setError(asApiError(e)),
    );
    return () => {
      cancelled = true;
    };
  }, [complete, vod.signedPlayback, vod.playbackUrl, vod.thumbnailUrl, vod._id, project.slug]);

  return (
    <section class="card" aria-labelledby="player-title">
      <h2 id="player-title">Player</h2>
      <ErrorAlert error={error} />
      {!complete ? (
        <p>{vod.archivedAt ? 'Archived VODs do not play.' : 'The player appears once the VOD is complete.'}</p>
      ) : urls ? (
        <>
          <Player source={{ kind: 'hls', url: urls.playbackUrl, live: false }} label={`Player for ${vod.name}`} poster={urls.thumbnailUrl ?? undefined} />
          {urls.thumbnailUrl && (
            <figure class="thumb">
              <img src={urls.thumbnailUrl} alt={`Thumbnail of ${vod.name}`} width={320} loading="lazy" />
              <figcaption>Thumbnail</figcaption>
            </figure>
          )}
        </>
      ) : (
        !error && <Loading what="the player" />
      )}
    </section>
  );
}
