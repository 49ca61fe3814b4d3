import { useState } from 'preact/hooks';

import { api, type CreatedWebhook, type Project, type Webhook } from '../api/client';
import { asApiError, call, type ApiError } from '../api/errors';
import { ConfirmButton, SecretField, ErrorAlert, Loading, PageHeading, Pager, Status, TableWrap } from '../components/ui';
import { useAsync } from '../lib/async';
import { Link, setQuery, useLocation } from '../lib/router';
import { canWrite } from '../lib/session';
import { PAGE } from './Streams';
import { WebhookForm } from './webhooks/WebhookForm';

export function Webhooks({ project }: { project: Project }) {
  const slug = project.slug;
  const skip = Math.max(0, Number(useLocation().query.get('skip') ?? 0) || 0);
  const list = useAsync(() => call(api.listWebhooks({ path: { slug }, query: { skip, limit: PAGE } })), [slug, skip]);
  const [creating, setCreating] = useState(false);
  const [created, setCreated] = useState<CreatedWebhook | null>(null);
  const [rowError, setRowError] = useState<ApiError | undefined>(undefined);
  const writer = canWrite(project);
  const base = `/p/${encodeURIComponent(slug)}/webhooks`;

  const replace = (w: Webhook) => list.setData((old) => old && { ...old, items: old.items.map((r) => (r._id === w._id ? w : r)) });
  const act = (p: Promise<void>) => {
    setRowError(undefined);
    p.catch((e: unknown) => setRowError(asApiError(e)));
  };

  return (
    <section>
      <PageHeading title="Webhooks">
        {writer && !creating && (
          <button type="button" class="primary" data-testid="webhook-new" onClick={() => (setCreating(true), setCreated(null))}>
            New webhook
          </button>
        )}
      </PageHeading>
      {created && (
        <section class="card secret-box" aria-labelledby="secret-title">
          <h2 id="secret-title">Signing secret</h2>
          <p>
            Deliveries to <span class="mono">{created.url}</span> are signed with this secret (HMAC-SHA256). Store it now:
            it is never shown again.
          </p>
          <SecretField label="Webhook secret" value={created.secret} testid="webhook-secret" whenMissing="Delete this webhook and create it again." />
          <button type="button" onClick={() => setCreated(null)}>
            I have stored it
          </button>
        </section>
      )}
      {creating && (
        <section class="card" aria-labelledby="new-webhook-title">
          <h2 id="new-webhook-title">New webhook</h2>
          <WebhookForm
            project={project}
            initial={{ url: '', description: '', events: ['*'], enabled: true }}
            submitLabel="Create webhook"
            onCancel={() => setCreating(false)}
            onSubmit={async (v) => {
              const w = await call(
                api.createWebhook({
                  path: { slug },
                  body: { url: v.url, description: v.description || null, events: v.events, enabled: v.enabled },
                }),
              );
              setCreated(w);
              setCreating(false);
              list.reload();
            }}
          />
        </section>
      )}
      <ErrorAlert error={rowError} />
      <ErrorAlert error={list.error} onRetry={list.reload} />
      {!list.data && !list.error && <Loading what="webhooks" />}
      {list.data &&
        (list.data.items.length === 0 ? (
          <p class="empty">No webhooks yet.</p>
        ) : (
          <TableWrap label="Webhooks">
            <table class="stack">
              <caption class="sr-only">Webhooks</caption>
              <thead>
                <tr>
                  <th scope="col">Endpoint</th>
                  <th scope="col">Events</th>
                  <th scope="col">State</th>
                  <th scope="col">Failures in a row</th>
                  {writer && <th scope="col">Actions</th>}
                </tr>
              </thead>
              <tbody>
                {list.data.items.map((w) => (
                  <tr key={w._id} data-id={w._id}>
                    <td data-label="Endpoint">
                      <Link href={`${base}/${encodeURIComponent(w._id)}`} class="mono">
                        {w.url}
                      </Link>
                      {w.description && <div class="hint">{w.description}</div>}
                    </td>
                    <td data-label="Events">{w.events.includes('*') ? 'every event' : w.events.join(', ')}</td>
                    <td data-label="State">
                      <Status value={w.enabled ? 'enabled' : 'disabled'} />
                    </td>
                    <td data-label="Failures in a row">{w.consecutiveFailures}</td>
                    {writer && (
                      <td data-label="Actions" class="row-actions">
                        <button
                          type="button"
                          onClick={() =>
                            act(call(api.updateWebhook({ path: { slug, id: w._id }, body: { enabled: !w.enabled } })).then(replace))
                          }
                        >
                          {w.enabled ? 'Disable' : 'Enable'}
                          <span class="sr-only"> {w.url}</span>
                        </button>
                        <ConfirmButton
                          label="Delete"
                          question={`Delete the webhook to ${w.url}?`}
                          confirmLabel="Delete webhook"
                          danger
                          onConfirm={() =>
                            call(api.deleteWebhook({ path: { slug, id: w._id } })).then(
                              () => list.reload(),
                              (e: unknown) => setRowError(asApiError(e)),
                            )
                          }
                        />
                      </td>
                    )}
                  </tr>
                ))}
              </tbody>
            </table>
          </TableWrap>
        ))}
      {list.data && <Pager skip={skip} limit={PAGE} total={list.data.total} what="webhooks" onPage={(s) => setQuery({ skip: s || null })} />}
    </section>
  );
}
