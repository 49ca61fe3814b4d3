import { useEffect, useState } from 'preact/hooks';

import { api, type Project, type Stream } from '../../api/client';
import { type ApiError, asApiError, call } from '../../api/errors';
import { ErrorAlert } from '../../components/ui';
import { type Playback, Player, type Source } from '../../preview/Player';

/**
 * The live preview: WHEP when the stream offers WebRTC, else LL-HLS started at the live edge.
 * A signed stream is previewed through a short playback ticket.
 */
export function StreamPreview({
  project,
  stream,
  onPlayback,
}: {
  project: Project;
  stream: Stream;
  /** Told of the preview's playback (its position, for a clip of the DVR window). */
  onPlayback?: (p: Playback | null) => void;
}) {
  const live = stream.status === 'live';
  const whep = stream.protocols.includes('webrtc');
  const [source, setSource] = useState<Source | null>(null);
  const [error, setError] = useState<ApiError | undefined>(undefined);

  useEffect(() => {
    setSource(null);
    setError(undefined);
    if (!live) return undefined;
    let cancelled = false;
    const pick = (urls: { hls?: string | undefined; webrtc?: string | undefined }): Source | null => {
      if (whep && urls.webrtc) return { kind: 'whep', url: urls.webrtc };
      if (urls.hls) return { kind: 'hls', url: urls.hls, live: true };
      return null;
    };
    if (!stream.signedPlayback) setSource(pick(stream.playbackUrls));
    else {
      call(
        api.createStreamPlaybackTicket({
          path: { slug: project.slug, id: stream._id },
          body: { expiresInSec: 600 },
        }),
      ).then(
        (t) => !cancelled && setSource(pick(t)),
        (e: unknown) => !cancelled && setError(asApiError(e)),
      );
    }
    return () => {
      cancelled = true;
    };
    // A new session (or a changed protocol or signing) restarts the player.
  }, [live, whep, stream.signedPlayback, stream.lastPushAt, stream._id, project.slug]);

  return (
    <section class="card" aria-labelledby="preview-title">
      <h2 id="preview-title">Preview</h2>
      <ErrorAlert error={error} />
      {live && source ? (
        <Player source={source} label={`Live preview of ${stream.name}`} testid="preview" onPlayback={onPlayback} />
      ) : (
        <figure class="player idle">
          <video data-testid="preview" aria-label={`Live preview of ${stream.name}`} muted playsInline controls />
          <figcaption>{live ? 'starting…' : 'The preview starts when the stream is live.'}</figcaption>
        </figure>
      )}
    </section>
  );
}
