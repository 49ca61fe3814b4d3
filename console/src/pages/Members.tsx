import { useState } from 'preact/hooks';

import { api, type AddedMember, type Project, type Role } from '../api/client';
import { type ApiError, asApiError, call } from '../api/errors';
import { Actions, FormAlert, SelectField, TextField, useForm } from '../components/form';
import { ConfirmButton, SecretField, ErrorAlert, Loading, PageHeading, Pager, TableWrap } from '../components/ui';
import { useAsync } from '../lib/async';
import { ROLE_LABELS, ROLES } from '../lib/catalog';
import { dateTime } from '../lib/format';
import { setQuery, useLocation } from '../lib/router';
import { isAdmin, session } from '../lib/session';
import { useStore } from '../lib/store';
import { PAGE } from './Streams';

const ROLE_OPTIONS = ROLES.map((r) => ({ value: r, label: ROLE_LABELS[r] }));

/** Members of the project and their roles (admins only; the API refuses others). */
export function Members({ project }: { project: Project }) {
  const slug = project.slug;
  const skip = Math.max(0, Number(useLocation().query.get('skip') ?? 0) || 0);
  const me = useStore(session);
  const myId = me.state === 'signed-in' ? me.user._id : null;
  const list = useAsync(() => call(api.listMembers({ path: { slug }, query: { skip, limit: PAGE } })), [slug, skip]);
  const [added, setAdded] = useState<AddedMember | null>(null);
  const [rowError, setRowError] = useState<ApiError | undefined>(undefined);

  if (!isAdmin(project)) {
    return (
      <section>
        <PageHeading title="Members" />
        <p>Only the project's admins manage its members.</p>
      </section>
    );
  }

  return (
    <section>
      <PageHeading title="Members" />
      <Invite
        slug={slug}
        onAdded={(m) => {
          setAdded(m);
          list.reload();
        }}
      />
      {added && (
        <section class="card secret-box" aria-labelledby="invite-title">
          <h2 id="invite-title">{added.invitation ? 'Invitation link' : 'Member added'}</h2>
          {added.invitation ? (
            <>
              <p>
                Send this link to {added.email}. It is shown only now, works once, and expires {dateTime(added.invitation.expiresAt)}.
              </p>
              <SecretField
                label="Invitation link"
                value={added.invitation.token ? invitationLink(added.invitation.token) : null}
                whenMissing="Remove the member and invite them again."
              />
            </>
          ) : (
            <p>{added.email} already has an account and is now a {added.role} of this project.</p>
          )}
          <button type="button" onClick={() => setAdded(null)}>
            Done
          </button>
        </section>
      )}
      <ErrorAlert error={rowError} />
      <ErrorAlert error={list.error} onRetry={list.reload} />
      {!list.data && !list.error && <Loading what="members" />}
      {list.data && (
        <TableWrap label="Members">
          <table class="stack">
            <caption class="sr-only">Members</caption>
            <thead>
              <tr>
                <th scope="col">E-mail</th>
                <th scope="col">Role</th>
                <th scope="col">Member since</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {list.data.items.map((m) => (
                <tr key={m._id} data-id={m._id}>
                  <td data-label="E-mail">
                    {m.email}
                    {m._id === myId && <span class="hint"> (you)</span>}
                  </td>
                  <td data-label="Role">
                    <SelectField<Role>
                      id={`role-${m._id}`}
                      label={`Role of ${m.email}`}
                      value={m.role}
                      options={ROLES.map((r) => ({ value: r, label: r }))}
                      onValue={(role) => {
                        setRowError(undefined);
                        call(api.updateMember({ path: { slug, user_id: m._id }, body: { role } })).then(
                          (next) => list.setData((old) => old && { ...old, items: old.items.map((x) => (x._id === next._id ? next : x)) }),
                          (e: unknown) => {
                            setRowError(asApiError(e));
                            list.reload();
                          },
                        );
                      }}
                    />
                  </td>
                  <td data-label="Member since">{dateTime(m.createdAt)}</td>
                  <td data-label="Actions">
                    <ConfirmButton
                      label={`Remove ${m.email}`}
                      question={`Remove ${m.email} from this project?`}
                      confirmLabel="Remove"
                      danger
                      onConfirm={() =>
                        call(api.removeMember({ path: { slug, user_id: m._id } })).then(
                          () => list.reload(),
                          (e: unknown) => setRowError(asApiError(e)),
                        )
                      }
                    />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
      )}
      {list.data && <Pager skip={skip} limit={PAGE} total={list.data.total} what="members" onPage={(s) => setQuery({ skip: s || null })} />}
    </section>
  );
}

function Invite({ slug, onAdded }: { slug: string; onAdded: (m: AddedMember) => void }) {
  const [email, setEmail] = useState('');
  const [role, setRole] = useState<Role>('member');
  const form = useForm(['email', 'role']);
  return (
    <section class="card" aria-labelledby="add-member-title">
      <h2 id="add-member-title">Invite someone</h2>
      <form noValidate
        onSubmit={(e) => {
          e.preventDefault();
          void form.submit(async () => {
            onAdded(await call(api.addMember({ path: { slug }, body: { email: email.trim(), role } })));
            setEmail('');
          });
        }}
      >
        <FormAlert messages={form.errors.general} />
        <div class="inline-fields">
          <TextField id="member-email" label="E-mail" type="email" required value={email} onValue={setEmail} errors={form.errors.fields.email} autocomplete="off" />
          <SelectField<Role> id="member-role" label="Role" value={role} options={ROLE_OPTIONS} onValue={setRole} errors={form.errors.fields.role} />
        </div>
        <Actions>
          <button type="submit" class="primary" disabled={form.busy}>
            Invite
          </button>
        </Actions>
      </form>
    </section>
  );
}

/** The console's own page that redeems an invitation. */
const invitationLink = (token: string) => `${window.location.origin}/accept-invitation?token=${encodeURIComponent(token)}`;
