import { useEffect, useState } from 'preact/hooks';

import type { Stream } from '../../api/client';
import { seconds } from '../../lib/format';

/**
 * Live health as far as the stream record carries it: `input` (codecs, size, frame rate,
 * bitrate) while live, uptime from `lastPushAt` (set when the push session opens). Viewer counts
 * are shown when the record carries them (CONTRACT: Viewers; not in the API document yet).
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
  const extra = stream as Stream & { viewers?: unknown; peakViewers?: unknown };
  const viewers = typeof extra.viewers === 'number' ? extra.viewers : null;
  const peak = typeof extra.peakViewers === 'number' ? extra.peakViewers : null;
  const since = stream.lastPushAt ? Date.parse(stream.lastPushAt) : NaN;

  return (
    <section class="card" aria-labelledby="health-title">
      <h2 id="health-title">Live health</h2>
      {!live ? (
        <p>Not live. Health appears while a push is on.</p>
      ) : (
        <dl class="facts">
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
          <dd>{viewers !== null ? `${viewers}${peak !== null ? ` (peak ${peak})` : ''}` : 'not reported by this server'}</dd>
        </dl>
      )}
    </section>
  );
}
