import { useState } from 'preact/hooks';

import { api } from '../api/client';
import { ApiError, call } from '../api/errors';
import { Actions, FormAlert, TextField, useForm } from '../components/form';
import { PageHeading } from '../components/ui';
import { session } from '../lib/session';
import { useStore } from '../lib/store';

/** One's own account: change the password (`POST /v1/auth/password`; other sessions end). */
export function Account() {
  const s = useStore(session);
  const [currentPassword, setCurrent] = useState('');
  const [newPassword, setNew] = useState('');
  const [again, setAgain] = useState('');
  const [changed, setChanged] = useState(false);
  const form = useForm(['currentPassword', 'newPassword', 'newPasswordAgain']);
  return (
    <section>
      <PageHeading title="Account" />
      {s.state === 'signed-in' && <p>Signed in as {s.user.email}.</p>}
      <section class="card" aria-labelledby="pw-title">
        <h2 id="pw-title">Change password</h2>
        <form noValidate
          onSubmit={(e) => {
            e.preventDefault();
            setChanged(false);
            void form
              .submit(async () => {
                if (newPassword !== again) throw new ApiError(400, ['newPasswordAgain the two new passwords differ']);
                try {
                  await call(api.changePassword({ body: { currentPassword, newPassword } }));
                } catch (err) {
                  // 403 here means the current password is wrong (not a missing permission).
                  if (err instanceof ApiError && err.status === 403) {
                    throw new ApiError(403, err.messages.map((m) => `currentPassword ${m}`));
                  }
                  throw err;
                }
              })
              .then((ok) => {
                if (!ok) return;
                setChanged(true);
                setCurrent('');
                setNew('');
                setAgain('');
              });
          }}
        >
          <FormAlert messages={form.errors.general} />
          {changed && (
            <p class="notice" role="status">
              Your password is changed. Your other sessions have been signed out.
            </p>
          )}
          <TextField
            id="currentPassword"
            label="Current password"
            type="password"
            autocomplete="current-password"
            required
            value={currentPassword}
            onValue={setCurrent}
            errors={form.errors.fields.currentPassword?.map(strip)}
          />
          <TextField
            id="newPassword"
            label="New password"
            type="password"
            autocomplete="new-password"
            required
            minLength={8}
            value={newPassword}
            onValue={setNew}
            hint="8 characters or more."
            errors={form.errors.fields.newPassword}
          />
          <TextField
            id="newPasswordAgain"
            label="New password again"
            type="password"
            autocomplete="new-password"
            required
            value={again}
            onValue={setAgain}
            errors={form.errors.fields.newPasswordAgain?.map(strip)}
          />
          <Actions>
            <button type="submit" class="primary" disabled={form.busy}>
              Change password
            </button>
          </Actions>
        </form>
      </section>
    </section>
  );
}

/** Messages the console words itself carry the field name only to be sorted; drop it to show. */
const strip = (m: string) => m.replace(/^(currentPassword|newPasswordAgain) (?=[a-z])/, '');
