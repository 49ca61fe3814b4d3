import { useEffect, useState } from 'preact/hooks';

import { api, type Project, type SimulcastTarget, type Stream } from '../../api/client';
import { type ApiError, asApiError, call } from '../../api/errors';
import { FormAlert, TextField, useForm } from '../../components/form';
import { ConfirmButton, ErrorAlert, Loading, Status, TableWrap } from '../../components/ui';
import { useAsync } from '../../lib/async';
import { bytes, dateTime } from '../../lib/format';
import { canWrite } from '../../lib/session';

/** How often a live stream's targets are read again (their status and bytes move). */
const POLL_MS = 3000;
const FIELDS = ['url', 'name'] as const;

/**
 * Simulcast (CONTRACT: Simulcast): where the push is sent on, as the publisher sent it. Lists the
 * stream's targets with their status, last error and bytes sent; a member adds one (the URL as
 * the platform hands it out: its key is shown masked from then on), pauses or resumes one, and
 * removes one.
 */
export function StreamSimulcast({ project, stream }: { project: Project; stream: Stream }) {
  const path = { slug: project.slug, id: stream._id };
  const list = useAsync(() => call(api.listSimulcastTargets({ path })), [project.slug, stream._id]);
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const [url, setUrl] = useState('');
  const [name, setName] = useState('');
  const form = useForm(FIELDS);
  const live = stream.status === 'live';
  useEffect(() => {
    if (!live) return undefined;
    const t = window.setInterval(() => document.visibilityState === 'visible' && list.reload(), POLL_MS);
    return () => window.clearInterval(t);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [live, project.slug, stream._id]);
  // The list as the stream's status changes (targets read idle when it is not live).
  // eslint-disable-next-line react-hooks/exhaustive-deps
  useEffect(() => list.reload(), [stream.status]);

  const writable = canWrite(project) && stream.status !== 'disabled';
  const full = (list.data?.items.length ?? 0) >= 10;
  const act = async (action: () => Promise<unknown>) => {
    setError(undefined);
    try {
      await action();
      list.reload();
    } catch (e) {
      setError(asApiError(e));
    }
  };
  const add = async (e: Event) => {
    e.preventDefault();
    const body = { url: url.trim(), ...(name.trim() ? { name: name.trim() } : {}) };
    const done = await form.submit(async () => {
      await call(api.createSimulcastTarget({ path, body }));
    });
    if (done) {
      setUrl('');
      setName('');
      list.reload();
    }
  };

  return (
    <section class="card" aria-labelledby="simulcast-title">
      <h2 id="simulcast-title">Simulcast</h2>
      <p class="hint">
        While the stream is live, its push is sent on, not re-encoded, to each target: YouTube, Twitch or any RTMP,
        RTMPS or SRT server.
      </p>
      <ErrorAlert error={error ?? list.error} onRetry={list.error ? list.reload : undefined} />
      {!list.data && !list.error && <Loading what="simulcast targets" />}
      {list.data &&
        (list.data.items.length === 0 ? (
          <p data-testid="simulcast-empty">No targets.</p>
        ) : (
          <TableWrap label="Simulcast targets">
            <table class="stack" data-testid="simulcast-targets">
              <caption class="sr-only">Simulcast targets of this stream</caption>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">URL</th>
                  <th scope="col">Status</th>
                  <th scope="col">Sent</th>
                  {writable && <th scope="col">Actions</th>}
                </tr>
              </thead>
              <tbody>
                {list.data.items.map((t) => (
                  <Row key={t._id} target={t} writable={writable} path={path} act={act} />
                ))}
              </tbody>
            </table>
          </TableWrap>
        ))}
      {writable && !full && (
        <form onSubmit={add} noValidate aria-labelledby="simulcast-add-title">
          <h3 id="simulcast-add-title">Add a target</h3>
          <FormAlert messages={form.errors.general} />
          <TextField
            id="simulcast-url"
            label="URL with the stream key"
            value={url}
            onValue={setUrl}
            errors={form.errors.fields.url}
            hint="rtmp://a.rtmp.youtube.com/live2/<key>, rtmps://…, or srt://host:port?streamid=…&passphrase=…"
            testid="simulcast-url"
            autocomplete="off"
            spellcheck={false}
            required
          />
          <TextField
            id="simulcast-name"
            label="Name (optional)"
            value={name}
            onValue={setName}
            errors={form.errors.fields.name}
            testid="simulcast-name"
            maxLength={100}
          />
          <div class="actions">
            <button type="submit" class="primary" disabled={form.busy} data-testid="simulcast-add">
              Add target
            </button>
          </div>
        </form>
      )}
      {writable && full && <p class="hint">A stream has at most 10 targets.</p>}
    </section>
  );
}

function Row({
  target: t,
  writable,
  path,
  act,
}: {
  target: SimulcastTarget;
  writable: boolean;
  path: { slug: string; id: string };
  act: (action: () => Promise<unknown>) => Promise<void>;
}) {
  const where = { ...path, tid: t._id };
  return (
    <tr data-testid={`simulcast-target-${t.name}`}>
      <td data-label="Name">{t.name}</td>
      <td data-label="URL" class="mono">
        {t.url}
      </td>
      <td data-label="Status">
        <Status value={t.enabled ? t.status : 'disabled'} testid="simulcast-status" />
        {t.lastError && t.status === 'error' && <p class="field-error">{t.lastError}</p>}
        {t.status === 'live' && t.connectedAt && <p class="hint">since {dateTime(t.connectedAt)}</p>}
      </td>
      <td data-label="Sent">{bytes(t.bytesSent)}</td>
      {writable && (
        <td data-label="Actions">
          <div class="actions wrap">
            <button
              type="button"
              onClick={() => act(() => call(api.updateSimulcastTarget({ path: where, body: { enabled: !t.enabled } })))}
            >
              {t.enabled ? 'Pause' : 'Resume'}
            </button>
            <ConfirmButton
              label="Remove"
              question={`Remove ${t.name}?`}
              confirmLabel="Remove"
              danger
              onConfirm={() => act(() => call(api.deleteSimulcastTarget({ path: where })))}
            />
          </div>
        </td>
      )}
    </tr>
  );
}
