import { useState } from 'preact/hooks';

import { api, type Project, type Stream, type StreamTicket as Ticket } from '../../api/client';
import { call } from '../../api/errors';
import { Actions, FormAlert, TextField, useForm } from '../../components/form';
import { CopyField } from '../../components/ui';
import { dateTime } from '../../lib/format';

/** Signed playback URLs for the stream (`streams:read`, so every role may make one). */
export function StreamTicket({ project, stream }: { project: Project; stream: Stream }) {
  const [expiresInSec, setExpires] = useState('3600');
  const [allowIp, setAllowIp] = useState('');
  const [ticket, setTicket] = useState<Ticket | null>(null);
  const form = useForm(['expiresInSec', 'allowIp', 'streamExpireSec']);
  return (
    <section class="card" aria-labelledby="ticket-title">
      <h2 id="ticket-title">Playback ticket</h2>
      <p class="hint">
        Signed URLs for {stream.signedPlayback ? 'this signed stream' : 'this stream (it is not signed now, so its plain URLs play too)'}.
      </p>
      <form noValidate
        onSubmit={(e) => {
          e.preventDefault();
          void form.submit(async () => {
            setTicket(
              await call(
                api.createStreamPlaybackTicket({
                  path: { slug: project.slug, id: stream._id },
                  body: { expiresInSec: Number(expiresInSec), allowIp: allowIp.trim() || null },
                }),
              ),
            );
          });
        }}
      >
        <FormAlert messages={form.errors.general} />
        <div class="inline-fields">
          <TextField
            id="expiresInSec"
            label="Valid for (seconds)"
            type="number"
            min={10}
            max={604800}
            value={expiresInSec}
            onValue={setExpires}
            errors={form.errors.fields.expiresInSec}
          />
          <TextField
            id="allowIp"
            label="Only from IP (optional)"
            value={allowIp}
            onValue={setAllowIp}
            errors={form.errors.fields.allowIp}
            autocomplete="off"
          />
        </div>
        <Actions>
          <button type="submit" disabled={form.busy}>
            Get signed URLs
          </button>
        </Actions>
      </form>
      {ticket && (
        <div class="result" role="status">
          <p>Valid until {dateTime(ticket.expiresAt)}.</p>
          {ticket.hls && <CopyField label="Signed HLS URL" value={ticket.hls} />}
          {ticket.webrtc && <CopyField label="Signed WHEP URL" value={ticket.webrtc} />}
          {ticket.rtsp && <CopyField label="Signed RTSP URL" value={ticket.rtsp} />}
        </div>
      )}
    </section>
  );
}
