import { useState } from 'preact/hooks';

import { api, type CreatedApiKey, type Project, type Scope } from '../api/client';
import { type ApiError, asApiError, call } from '../api/errors';
import { Actions, ChoiceGroup, FormAlert, TextField, useForm } from '../components/form';
import { ConfirmButton, SecretField, ErrorAlert, Loading, PageHeading, Pager, Status, TableWrap } from '../components/ui';
import { useAsync } from '../lib/async';
import { dateTime } from '../lib/format';
import { setQuery, useLocation } from '../lib/router';
import { isAdmin } from '../lib/session';
import { PAGE } from './Streams';

/** API keys of the project. Administration (create, revoke) is for admins only. */
export function ApiKeys({ project }: { project: Project }) {
  const slug = project.slug;
  const skip = Math.max(0, Number(useLocation().query.get('skip') ?? 0) || 0);
  const list = useAsync(() => call(api.listApiKeys({ path: { slug }, query: { skip, limit: PAGE } })), [slug, skip]);
  const [creating, setCreating] = useState(false);
  const [created, setCreated] = useState<CreatedApiKey | null>(null);
  const [rowError, setRowError] = useState<ApiError | undefined>(undefined);
  const admin = isAdmin(project);

  return (
    <section>
      <PageHeading title="API keys">
        {admin && !creating && (
          <button type="button" class="primary" data-testid="api-key-new" onClick={() => (setCreating(true), setCreated(null))}>
            New API key
          </button>
        )}
      </PageHeading>
      {created && (
        <section class="card secret-box" aria-labelledby="key-secret-title">
          <h2 id="key-secret-title">Your new key</h2>
          <p>Store it now: it is never shown again. Send it as <span class="mono">Authorization: Bearer …</span>.</p>
          <SecretField label="API key" value={created.key} testid="api-key-secret" whenMissing="Revoke this key and create another." />
          <button type="button" onClick={() => setCreated(null)}>
            I have stored it
          </button>
        </section>
      )}
      {creating && (
        <NewKey
          project={project}
          onCancel={() => setCreating(false)}
          onCreated={(k) => {
            setCreated(k);
            setCreating(false);
            list.reload();
          }}
        />
      )}
      <ErrorAlert error={rowError} />
      <ErrorAlert error={list.error} onRetry={list.reload} />
      {!list.data && !list.error && <Loading what="API keys" />}
      {list.data &&
        (list.data.items.length === 0 ? (
          <p class="empty">No API keys.</p>
        ) : (
          <TableWrap label="API keys">
            <table class="stack">
              <caption class="sr-only">API keys</caption>
              <thead>
                <tr>
                  <th scope="col">Prefix</th>
                  <th scope="col">Label</th>
                  <th scope="col">Scopes</th>
                  <th scope="col">Last used</th>
                  <th scope="col">Revoked</th>
                  {admin && <th scope="col">Actions</th>}
                </tr>
              </thead>
              <tbody>
                {list.data.items.map((k) => (
                  <tr key={k._id} data-id={k._id}>
                    <td data-label="Prefix" class="mono">{k.prefix}…</td>
                    <td data-label="Label">{k.label || '—'}</td>
                    <td data-label="Scopes">{k.scopes.join(', ')}</td>
                    <td data-label="Last used">{dateTime(k.lastUsedAt)}</td>
                    <td data-label="Revoked">{k.revokedAt ? <Status value="revoked" /> : 'no'}</td>
                    {admin && (
                      <td data-label="Actions">
                        {!k.revokedAt && (
                          <ConfirmButton
                            label={`Revoke ${k.prefix}`}
                            question={`Revoke ${k.label || k.prefix}? Anything using it stops working at once.`}
                            confirmLabel="Revoke key"
                            danger
                            onConfirm={() =>
                              call(api.revokeApiKey({ path: { slug, id: k._id } })).then(
                                (r) => list.setData((old) => old && { ...old, items: old.items.map((x) => (x._id === r._id ? r : x)) }),
                                (e: unknown) => setRowError(asApiError(e)),
                              )
                            }
                          />
                        )}
                      </td>
                    )}
                  </tr>
                ))}
              </tbody>
            </table>
          </TableWrap>
        ))}
      {list.data && <Pager skip={skip} limit={PAGE} total={list.data.total} what="API keys" onPage={(s) => setQuery({ skip: s || null })} />}
    </section>
  );
}

function NewKey({ project, onCreated, onCancel }: { project: Project; onCreated: (k: CreatedApiKey) => void; onCancel: () => void }) {
  const scopes = useAsync(() => call(api.listScopes({ path: { slug: project.slug } })), [project.slug]);
  const [label, setLabel] = useState('');
  const [chosen, setChosen] = useState<Scope[]>([]);
  const form = useForm(['label', 'scopes']);
  return (
    <section class="card" aria-labelledby="new-key-title">
      <h2 id="new-key-title">New API key</h2>
      <form noValidate
        onSubmit={(e) => {
          e.preventDefault();
          void form.submit(async () => {
            onCreated(
              await call(
                api.createApiKey({
                  path: { slug: project.slug },
                  // No scope ticked: the server's default (`*`) applies.
                  body: { label: label.trim(), scopes: chosen.length ? chosen : null },
                }),
              ),
            );
          });
        }}
      >
        <FormAlert messages={form.errors.general} />
        <TextField
          id="api-key-label"
          label="Label"
          maxLength={100}
          value={label}
          onValue={setLabel}
          errors={form.errors.fields.label}
          testid="api-key-label"
          autocomplete="off"
        />
        <ErrorAlert error={scopes.error} onRetry={scopes.reload} />
        {scopes.data && (
          <ChoiceGroup
            id="api-key-scopes"
            legend="Scopes (none ticked: every scope, *)"
            options={scopes.data.scopes}
            value={chosen}
            onValue={setChosen}
            errors={form.errors.fields.scopes}
          />
        )}
        <Actions>
          <button type="submit" class="primary" disabled={form.busy} data-testid="api-key-save">
            Create key
          </button>
          <button type="button" onClick={onCancel}>
            Cancel
          </button>
        </Actions>
      </form>
    </section>
  );
}
