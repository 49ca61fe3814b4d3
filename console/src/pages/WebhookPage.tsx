import { useEffect, useState } from 'preact/hooks';

import { api, type Delivery, type Project, type Webhook } from '../api/client';
import { type ApiError, asApiError, call } from '../api/errors';
import { ConfirmButton, ErrorAlert, Gone, Loading, PageHeading, Status, TableWrap } from '../components/ui';
import { useAsync } from '../lib/async';
import { dateTime } from '../lib/format';
import { Link, navigate } from '../lib/router';
import { canWrite } from '../lib/session';
import { WebhookForm } from './webhooks/WebhookForm';

const DELIVERIES = 100;
/** While a delivery is pending, the log is re-read this often. */
const PENDING_POLL_MS = 3000;

export function WebhookPage({ project, id }: { project: Project; id: string }) {
  const slug = project.slug;
  const base = `/p/${encodeURIComponent(slug)}/webhooks`;
  const hook = useAsync<Webhook>(() => call(api.getWebhook({ path: { slug, id } })), [slug, id]);
  const deliveries = useAsync(
    () => call(api.listWebhookDeliveries({ path: { slug }, query: { webhookId: id, limit: DELIVERIES } })),
    [slug, id],
  );
  const [editing, setEditing] = useState(false);
  const [actionError, setActionError] = useState<ApiError | undefined>(undefined);
  const [notice, setNotice] = useState<string | null>(null);
  const writer = canWrite(project);

  const pending = deliveries.data?.items.some((d) => d.status === 'pending') ?? false;
  useEffect(() => {
    if (!pending) return undefined;
    const t = window.setInterval(() => document.visibilityState === 'visible' && deliveries.reload(), PENDING_POLL_MS);
    return () => window.clearInterval(t);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [pending]);

  if (hook.error?.gone) return <Gone what="Webhook" back={base} backLabel="Back to the webhooks" />;
  if (!hook.data) return hook.error ? <ErrorAlert error={hook.error} onRetry={hook.reload} /> : <Loading what="the webhook" />;
  const w = hook.data;

  const act = async (p: () => Promise<void>) => {
    setActionError(undefined);
    setNotice(null);
    try {
      await p();
    } catch (e) {
      const err = asApiError(e);
      if (err.gone) hook.reload();
      else setActionError(err);
    }
  };
  const upsertDelivery = (d: Delivery) =>
    deliveries.setData((old) => {
      if (!old) return { items: [d] };
      const rest = old.items.filter((x) => x._id !== d._id);
      return { ...old, items: [d, ...rest] };
    });

  return (
    <article>
      <p class="crumbs">
        <Link href={base}>Webhooks</Link>
      </p>
      <PageHeading title="Webhook">
        <span class="status-line">
          <Status value={w.enabled ? 'enabled' : 'disabled'} />
        </span>
      </PageHeading>
      <ErrorAlert error={actionError} />
      {notice && (
        <p class="notice" role="status">
          {notice}
        </p>
      )}
      <section class="card" aria-labelledby="hook-title">
        <h2 id="hook-title">Endpoint</h2>
        {editing ? (
          <WebhookForm
            project={project}
            initial={{ url: w.url, description: w.description, events: w.events, enabled: w.enabled }}
            submitLabel="Save changes"
            onCancel={() => setEditing(false)}
            onSubmit={async (v) => {
              const next = await call(
                api.updateWebhook({
                  path: { slug, id },
                  body: { url: v.url, description: v.description, events: v.events, enabled: v.enabled },
                }),
              );
              hook.setData(() => next);
              setEditing(false);
            }}
          />
        ) : (
          <>
            <dl class="facts">
              <dt>URL</dt>
              <dd class="mono">{w.url}</dd>
              <dt>Description</dt>
              <dd>{w.description || '—'}</dd>
              <dt>Events</dt>
              <dd>{w.events.includes('*') ? 'every event' : w.events.join(', ')}</dd>
              <dt>Failures in a row</dt>
              <dd>{w.consecutiveFailures}</dd>
              <dt>Created</dt>
              <dd>{dateTime(w.createdAt)}</dd>
            </dl>
            {writer && (
              <div class="actions wrap">
                <button type="button" onClick={() => setEditing(true)}>
                  Edit
                </button>
                <button
                  type="button"
                  onClick={() =>
                    act(async () => {
                      const next = await call(api.updateWebhook({ path: { slug, id }, body: { enabled: !w.enabled } }));
                      hook.setData(() => next);
                    })
                  }
                >
                  {w.enabled ? 'Disable' : 'Enable'}
                </button>
                <button
                  type="button"
                  onClick={() =>
                    act(async () => {
                      const d = await call(api.testWebhook({ path: { slug, id } }));
                      upsertDelivery(d);
                      setNotice('A webhook.test event is on its way; its delivery is listed below.');
                    })
                  }
                >
                  Send a test
                </button>
                <ConfirmButton
                  label="Delete webhook"
                  question="Delete this webhook? Nothing more is delivered to it."
                  confirmLabel="Delete"
                  danger
                  onConfirm={() =>
                    act(async () => {
                      await call(api.deleteWebhook({ path: { slug, id } }));
                      navigate(base);
                    })
                  }
                />
              </div>
            )}
          </>
        )}
      </section>
      <section class="card" aria-labelledby="log-title">
        <div class="section-head">
          <h2 id="log-title">Deliveries</h2>
          <button type="button" onClick={deliveries.reload}>
            Refresh
          </button>
        </div>
        <ErrorAlert error={deliveries.error} onRetry={deliveries.reload} />
        {!deliveries.data && !deliveries.error && <Loading what="deliveries" />}
        {deliveries.data &&
          (deliveries.data.items.length === 0 ? (
            <p>Nothing delivered yet.</p>
          ) : (
            <TableWrap label="Deliveries">
              <table class="stack">
                <caption class="sr-only">Deliveries, newest first</caption>
                <thead>
                  <tr>
                    <th scope="col">Event</th>
                    <th scope="col">Status</th>
                    <th scope="col">Response</th>
                    <th scope="col">Attempts</th>
                    <th scope="col">Created</th>
                    <th scope="col">Last attempt</th>
                    <th scope="col">Next attempt</th>
                    {writer && <th scope="col">Actions</th>}
                  </tr>
                </thead>
                <tbody>
                  {deliveries.data.items.map((d) => (
                    <tr key={d._id} data-testid="delivery-row" data-id={d._id}>
                      <td data-label="Event">
                        {d.event}
                        {d.error && <div class="hint">{d.error}</div>}
                      </td>
                      <td data-label="Status">
                        <Status value={d.status} />
                      </td>
                      <td data-label="Response">{d.responseCode ?? '—'}</td>
                      <td data-label="Attempts">{d.attempts}</td>
                      <td data-label="Created">{dateTime(d.createdAt)}</td>
                      <td data-label="Last attempt">{dateTime(d.lastAttemptAt)}</td>
                      <td data-label="Next attempt">{dateTime(d.nextAttemptAt)}</td>
                      {writer && (
                        <td data-label="Actions">
                          <button
                            type="button"
                            onClick={() =>
                              act(async () => {
                                upsertDelivery(await call(api.redeliverWebhookDelivery({ path: { slug, id: d._id } })));
                              })
                            }
                          >
                            Redeliver<span class="sr-only"> {d.event} of {dateTime(d.createdAt)}</span>
                          </button>
                        </td>
                      )}
                    </tr>
                  ))}
                </tbody>
              </table>
            </TableWrap>
          ))}
      </section>
    </article>
  );
}
