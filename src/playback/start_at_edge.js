// Starting hls.js at the live edge: the one copy, used by the demo page (src/playback/demo.html,
// inlined by demo.rs), the test player (tests/player/player.html, inlined by
// tests/support/player.rs) and the console (console/src/preview/startAtEdge.ts imports it; its
// types are in start_at_edge.d.ts). docs/live-hls.md, "Starting at the edge".
//
// hls.js picks where to start when the first media playlist arrives, then spends about half a
// second loading and buffering before the picture moves, and stays that much further behind the
// edge than its target (it only speeds up with over 1 s buffered). So the video waits, paused,
// until hls.js has buffered up to the position it would sync to now (the edge less its target
// latency), seeks there, `lead` ahead (default 0.1 s, for the seek and the start of play), and
// plays. After 2 s without that much buffered it plays where it is; a viewer who presses play
// first keeps what they chose. Call it before `loadSource`/`attachMedia`; it returns a function
// that removes its listeners.
export function startAtEdge(hls, video, options) {
  const o = options || {};
  const lead = typeof o.lead === "number" ? o.lead : 0.1;
  const play = o.play || (() => { const p = video.play(); if (p) p.catch(() => {}); });
  const onSeek = o.onSeek || (() => {});
  // hls.js's Events.FRAG_BUFFERED (a string enum; the same value in every 1.x release).
  const FRAG_BUFFERED = "hlsFragBuffered";
  video.autoplay = false;
  let started = false;
  let since = null;
  let timer;
  const start = () => {
    if (started || !video.paused || video.readyState < 3 || video.seeking) return;
    const sync = hls.liveSyncPosition;
    const b = video.buffered;
    const end = b.length ? b.end(b.length - 1) : 0;
    if (since === null) { since = performance.now(); timer = setTimeout(start, 2050); }
    const waited = performance.now() - since > 2000;
    if (sync !== null && sync > video.currentTime + 0.02) {
      const at = Math.min(sync + lead, end - 0.1);
      if (at < sync && !waited) return;
      if (at > video.currentTime) {
        started = true;
        onSeek(at, sync);
        video.addEventListener("seeked", play, { once: true });
        video.currentTime = at;
        return;
      }
    }
    started = true;
    play();
  };
  video.addEventListener("canplay", start);
  hls.on(FRAG_BUFFERED, start);
  return () => {
    clearTimeout(timer);
    video.removeEventListener("canplay", start);
    video.removeEventListener("seeked", play);
    hls.off(FRAG_BUFFERED, start);
  };
}
