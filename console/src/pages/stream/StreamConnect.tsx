import type { Stream, StreamWithCredentials } from '../../api/client';
import { CopyField, SecretField } from '../../components/ui';

/**
 * Where and how to push: OBS's fields, the complete RTMP URL, SRT and WHIP. The password (and so
 * the complete RTMP and SRT URLs, which carry it) exists only right after create or rotate.
 */
export function StreamConnect({ stream, creds }: { stream: Stream; creds: StreamWithCredentials | undefined }) {
  return (
    <section class="card" aria-labelledby="connect-title">
      <h2 id="connect-title">Push settings</h2>
      <p class="hint">
        In OBS: Settings → Stream → Service “Custom…”, then the server and stream key below; tick “Use
        authentication” for the username and password.
      </p>
      <CopyField label="OBS server" value={stream.obs.server} testid="obs-server" />
      <CopyField label="Stream key" value={stream.obs.streamKey} testid="obs-stream-key" secret />
      <CopyField label="Username" value={stream.pushUsername} testid="push-username" />
      {creds ? (
        <>
          <SecretField label="Password" value={creds.pushPassword} testid="push-password" whenMissing="Rotate the push credentials to get new ones." />
          <p class="notice" role="status">
            Copy the password now: it is shown only on this page, until you leave it. Rotating the credentials makes a
            new one.
          </p>
          <SecretField label="RTMP ingest URL (ffmpeg takes it as is)" value={creds.ingestUrl} testid="ingest-url" whenMissing="Rotate the push credentials to get new ones." />
          <SecretField label="SRT URL" value={creds.srtUrl} testid="srt-url" whenMissing="Rotate the push credentials to get new ones." />
          <h3>Backup encoder</h3>
          <p class="hint">
            A second encoder pushing to these stands by while the primary is live and takes over within a second when the
            primary goes quiet or away; the primary takes over again when it is back. Same key, username and password.
          </p>
          <CopyField label="Backup OBS server" value={creds.backup.obs.server} testid="backup-obs-server" />
          <SecretField label="Backup RTMP ingest URL" value={creds.backup.ingestUrl} testid="backup-ingest-url" whenMissing="Rotate the push credentials to get new ones." />
          <SecretField label="Backup SRT URL" value={creds.backup.srtUrl} testid="backup-srt-url" whenMissing="Rotate the push credentials to get new ones." />
        </>
      ) : (
        <p class="hint">
          The password, and the complete RTMP and SRT URLs that contain it (the backup encoder's too), are shown only
          right after the stream is created or its push credentials are rotated.
        </p>
      )}
      <CopyField label="WHIP URL (bearer token: the password)" value={stream.whipUrl} testid="whip-url" />
      {stream.playbackUrls.hls && <CopyField label="HLS playback URL" value={stream.playbackUrls.hls} />}
      {stream.playbackUrls.webrtc && <CopyField label="WHEP playback URL" value={stream.playbackUrls.webrtc} />}
      {stream.playbackUrls.rtsp && <CopyField label="RTSP playback URL" value={stream.playbackUrls.rtsp} />}
    </section>
  );
}
