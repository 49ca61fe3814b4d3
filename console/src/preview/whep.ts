// WebRTC playback over WHEP (RFC 9725's sibling, draft-ietf-wish-whep), as the demo page does it:
// one offer with the gathered candidates, the answer carries the server's. The WHEP endpoint is
// part of the playback origin, not of the REST API, so it is reached with plain fetch.
import type { Playback } from './hls';

export async function playWhep(video: HTMLVideoElement, url: string, onState: (s: string, bad?: boolean) => void): Promise<Playback> {
  const pc = new RTCPeerConnection();
  let location: string | null = null;
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    video.srcObject = null;
    if (!location) {
      pc.close();
      return;
    }
    // End the session with DELETE first and close the peer connection after: closed first, the
    // server may drop the session on its own and answer the DELETE 404.
    const close = () => pc.signalingState !== 'closed' && pc.close();
    const fallback = window.setTimeout(close, 2000);
    fetch(new URL(location, url), { method: 'DELETE', keepalive: true })
      .catch(() => {
        // The server ends an abandoned session by itself.
      })
      .finally(() => {
        window.clearTimeout(fallback);
        close();
      });
  };
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addTransceiver('audio', { direction: 'recvonly' });
  const media = new MediaStream();
  pc.ontrack = (e) => {
    media.addTrack(e.track);
    video.srcObject = media;
  };
  pc.onconnectionstatechange = () => onState(`WebRTC ${pc.connectionState}`, pc.connectionState === 'failed');
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise<void>((done) => {
    if (pc.iceGatheringState === 'complete') return done();
    pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && done();
    window.setTimeout(done, 2000);
  });
  if (stopped) return { stop };
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/sdp' },
    body: pc.localDescription?.sdp ?? '',
  });
  if (res.status !== 201) {
    const why = res.headers.get('X-Deny-Reason') ?? (await res.text());
    stop();
    onState(`WHEP refused (${res.status}): ${why}`, true);
    return { stop };
  }
  location = res.headers.get('Location');
  await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
  return { stop };
}
