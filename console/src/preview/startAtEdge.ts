// Starting hls.js at the live edge: the same logic as the demo page (src/playback/demo.html,
// `startAtEdge`) and the test player's `startLive=1` (tests/player/player.html), written once as a
// module so the demo page can share it. docs/live-hls.md, "Starting at the edge".
//
// hls.js picks where to start when the first media playlist arrives, then spends about half a
// second loading and buffering before the picture moves, and stays that much further behind the
// edge than its target (it only speeds up with over 1 s buffered). So the video waits, paused,
// until hls.js has buffered up to the position it would sync to now (the edge less its target
// latency), seeks there, 0.1 s ahead for the seek and the start of play, and plays. After 2 s
// without that much buffered it plays where it is; a viewer who presses play first keeps what
// they chose.
import Hls from 'hls.js';

/** How long to wait for the edge to be buffered before playing wherever the video is. */
export const EDGE_WAIT_MS = 2000;
/** How far past the sync position to seek, for the seek itself and the start of play. */
export const EDGE_LEAD_S = 0.1;

/**
 * Makes `video` start playing at `hls`'s live sync position instead of where hls.js first
 * buffered. Call it before `hls.loadSource` / `hls.attachMedia`. Returns a function that removes
 * its listeners (for a player torn down before it started).
 */
export function startAtEdge(hls: Hls, video: HTMLVideoElement): () => void {
  video.autoplay = false;
  let started = false;
  let since: number | null = null;
  let timer: number | undefined;

  const play = () => {
    video.play().catch(() => {
      // Autoplay refused (a muted video rarely is): the controls are there to start it.
    });
  };

  const start = () => {
    if (started || !video.paused || video.readyState < HTMLMediaElement.HAVE_FUTURE_DATA || video.seeking) return;
    const sync = hls.liveSyncPosition;
    const buffered = video.buffered;
    const end = buffered.length ? buffered.end(buffered.length - 1) : 0;
    if (since === null) {
      since = performance.now();
      timer = window.setTimeout(start, EDGE_WAIT_MS + 50);
    }
    const waited = performance.now() - since > EDGE_WAIT_MS;
    if (sync !== null && sync > video.currentTime + 0.02) {
      const at = Math.min(sync + EDGE_LEAD_S, end - EDGE_LEAD_S);
      if (at < sync && !waited) return;
      if (at > video.currentTime) {
        started = true;
        video.addEventListener('seeked', play, { once: true });
        video.currentTime = at;
        return;
      }
    }
    started = true;
    play();
  };

  video.addEventListener('canplay', start);
  hls.on(Hls.Events.FRAG_BUFFERED, start);
  return () => {
    window.clearTimeout(timer);
    video.removeEventListener('canplay', start);
    video.removeEventListener('seeked', play);
    hls.off(Hls.Events.FRAG_BUFFERED, start);
  };
}
