// A video player for a live preview (WHEP or LL-HLS at the edge) or a VOD (HLS). hls.js arrives
// by dynamic import, only when an HLS source is shown.
import { useEffect, useRef, useState } from 'preact/hooks';

import type { Playback } from './hls';

export type { Playback };

export type Source = { kind: 'whep'; url: string } | { kind: 'hls'; url: string; live: boolean };

export function Player({
  source,
  label,
  testid,
  poster,
  onPlayback,
}: {
  source: Source;
  label: string;
  testid?: string;
  poster?: string | undefined;
  /** Told of the playback once it runs, and of null when it stops. */
  onPlayback?: (p: Playback | null) => void;
}) {
  const video = useRef<HTMLVideoElement>(null);
  const [state, setState] = useState<{ text: string; bad: boolean }>({ text: 'starting…', bad: false });
  const key = `${source.kind} ${source.url}`;

  useEffect(() => {
    const el = video.current;
    if (!el) return undefined;
    let playback: Playback | null = null;
    let cancelled = false;
    const onState = (text: string, bad = false) => !cancelled && setState({ text, bad });
    const started: Promise<Playback> =
      source.kind === 'whep'
        ? import('./whep').then(({ playWhep }) => playWhep(el, source.url, onState))
        : import('./hls').then(({ playHls }) => playHls(el, source.url, source.live, onState));
    started.then(
      (p) => {
        if (cancelled) p.stop();
        else {
          playback = p;
          onPlayback?.(p);
        }
      },
      (e: unknown) => onState(`could not start: ${e instanceof Error ? e.message : String(e)}`, true),
    );
    return () => {
      cancelled = true;
      playback?.stop();
      onPlayback?.(null);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key]);

  return (
    <figure class="player">
      <video
        ref={video}
        data-testid={testid}
        aria-label={label}
        muted
        playsInline
        controls
        autoPlay={source.kind === 'whep'}
        poster={poster}
      />
      <figcaption class={state.bad ? 'bad' : ''} aria-live="polite">
        {state.text}
      </figcaption>
    </figure>
  );
}
