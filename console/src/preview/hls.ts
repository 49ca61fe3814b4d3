// HLS playback with hls.js. This module (and hls.js with it) is only ever loaded by a dynamic
// import when a player needs it, so the rest of the console does not carry it.
import Hls from 'hls.js';

import { startAtEdge } from './startAtEdge';

export interface Playback {
  stop: () => void;
  /** The wall-clock time (ms) of the frame on screen, from the playlist's dates; null when unknown. */
  playingDate?: () => number | null;
}

/**
 * Plays `url` in `video`: hls.js wherever Media Source Extensions exist (some browsers claim
 * native HLS but cannot play CMAF parts), native HLS only without MSE (iPhone Safari). A live
 * source starts at the edge.
 */
export function playHls(video: HTMLVideoElement, url: string, live: boolean, onState: (s: string, bad?: boolean) => void): Playback {
  const mse = 'ManagedMediaSource' in window || 'MediaSource' in window;
  if (!mse && video.canPlayType('application/vnd.apple.mpegurl')) {
    video.src = url;
    onState('playing with the browser’s own HLS');
    return {
      stop: () => {
        video.removeAttribute('src');
        video.load();
      },
    };
  }
  if (!Hls.isSupported()) {
    onState('this browser cannot play HLS', true);
    return { stop: () => undefined };
  }
  const hls = new Hls({ lowLatencyMode: live });
  const undoEdge = live ? startAtEdge(hls, video) : () => undefined;
  hls.on(Hls.Events.ERROR, (_e, data) => {
    if (data.fatal) onState(`playback failed: ${data.details}`, true);
  });
  hls.on(Hls.Events.MANIFEST_PARSED, () => onState(live ? 'joining the live edge…' : 'ready'));
  video.addEventListener('playing', () => onState(live ? 'playing live (LL-HLS)' : 'playing'));
  // Like the demo page: how far behind the live edge the picture is, once a second.
  const latency = live
    ? window.setInterval(() => {
        if (!video.paused && Number.isFinite(hls.latency)) onState(`playing live (LL-HLS), ${hls.latency.toFixed(1)} s behind`);
      }, 1000)
    : undefined;
  hls.loadSource(url);
  hls.attachMedia(video);
  return {
    stop: () => {
      window.clearInterval(latency);
      undoEdge();
      hls.destroy();
    },
    playingDate: () => hls.playingDate?.getTime() ?? null,
  };
}
