import { useEffect, useState } from 'preact/hooks';

import type { Stream } from '../../api/client';
import { seconds } from '../../lib/format';

/**
 * Live health as far as the stream record carries it: `input` (codecs, size, frame rate,
 * bitrate) while live, uptime from `lastPushAt` (set when the push session opens), and the
 * viewers now by protocol and the session's peak (CONTRACT: Viewers; each node reports every 2 s,
 * the page re-reads the record every 5 s while live).
 */
export function StreamHealth({ stream }: { stream: Stream }) {
  const live = stream.status === 'live';
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    if (!live) return undefined;
    const t = window.setInterval(() => setNow(Date.now()), 1000);
    return () => window.clearInterval(t);
  }, [live]);
  const input = stream.input;
  const by = stream.viewerCounts;
  const since = stream.lastPushAt ? Date.parse(stream.lastPushAt) : NaN;

  return (
    <section class="card" aria-labelledby="health-title">
      <h2 id="health-title">Live health</h2>
      {!live ? (
        <p>
          Not live. Health appears while a push is on.
          {stream.peakViewers > 0 && (
            <span data-testid="stream-peak"> The last session peaked at {stream.peakViewers} viewers.</span>
          )}
        </p>
      ) : (
        <dl class="facts">
          <dt>Input</dt>
          <dd data-testid="stream-input">
            {input?.active === 'slate'
              ? 'the slate: the publisher is away (reconnect window)'
              : input?.active === 'backup'
                ? 'the backup encoder (the primary is away)'
                : input?.active ?? '—'}
          </dd>
          <dt>Standing by</dt>
          <dd data-testid="stream-standing-by">
            {input?.standingBy?.length
              ? `${input.standingBy.join(', ')}, ready to take over`
              : 'nothing (a backup encoder can push to the backup URLs)'}
          </dd>
          <dt>Uptime</dt>
          <dd>{Number.isFinite(since) ? seconds((now - since) / 1000) : '—'}</dd>
          <dt>Input bitrate</dt>
          <dd>{input?.bitrateKbps != null ? `${input.bitrateKbps} kbit/s` : '—'}</dd>
          <dt>Resolution</dt>
          <dd>{input?.width && input.height ? `${input.width}×${input.height}` : '—'}</dd>
          <dt>Frame rate</dt>
          <dd>{input?.frameRate != null ? `${Math.round(input.frameRate * 100) / 100} fps` : '—'}</dd>
          <dt>Video codec</dt>
          <dd>{input?.videoCodec ?? '—'}</dd>
          <dt>Audio</dt>
          <dd>
            {input?.audioCodec
              ? [
                  input.audioCodec,
                  input.audioSampleRate ? `${input.audioSampleRate} Hz` : null,
                  input.audioChannels ? `${input.audioChannels} ch` : null,
                ]
                  .filter(Boolean)
                  .join(', ')
              : '—'}
          </dd>
          <dt>Viewers</dt>
          <dd data-testid="stream-viewers">
            {stream.viewers} now (HLS {by.hls}, WebRTC {by.webrtc}, RTSP {by.rtsp}), peak {stream.peakViewers}
          </dd>
        </dl>
      )}
    </section>
  );
}
