import { useState } from 'preact/hooks';

import { api } from '../api/client';
import { ApiError, call } from '../api/errors';
import { Actions, FormAlert, TextField, useForm } from '../components/form';
import { PageHeading } from '../components/ui';
import { Link, useLocation } from '../lib/router';
import { session } from '../lib/session';

/** `/accept-invitation?token=…`: the invited person sets their password, then signs in. */
export function AcceptInvitation() {
  const token = useLocation().query.get('token') ?? '';
  const [password, setPassword] = useState('');
  const [again, setAgain] = useState('');
  const [done, setDone] = useState<string | null>(null);
  const form = useForm(['token', 'password', 'passwordAgain']);

  if (done) {
    return (
      <section class="card auth">
        <PageHeading title="Invitation accepted" />
        <p role="status">Your password is set for {done}. You can now sign in.</p>
        <p>
          <Link
            href="/"
            onClick={() => {
              if (session.get().state !== 'signed-in') session.set({ state: 'signed-out' });
            }}
          >
            Go to sign-in
          </Link>
        </p>
      </section>
    );
  }
  return (
    <section class="card auth">
      <PageHeading title="Accept your invitation" />
      {!token ? (
        <div class="alert" role="alert">
          <p>This link has no invitation token. Open the link exactly as you received it.</p>
        </div>
      ) : (
        <form noValidate
          onSubmit={(e) => {
            e.preventDefault();
            void form.submit(async () => {
              if (password !== again) throw new ApiError(400, ['passwordAgain the two passwords differ']);
              try {
                const user = await call(api.acceptInvitation({ body: { token, password } }));
                setDone(user.email);
              } catch (err) {
                if (err instanceof ApiError && err.status === 404) {
                  throw new ApiError(404, ['This invitation is unknown, already used or expired. Ask for a new one.']);
                }
                throw err;
              }
            });
          }}
        >
          <p>Choose a password (8 characters or more) for your Sluice account.</p>
          <FormAlert messages={[...form.errors.general, ...(form.errors.fields.token ?? [])]} />
          <TextField
            id="password"
            label="New password"
            type="password"
            autocomplete="new-password"
            required
            minLength={8}
            value={password}
            onValue={setPassword}
            errors={form.errors.fields.password}
          />
          <TextField
            id="passwordAgain"
            label="New password again"
            type="password"
            autocomplete="new-password"
            required
            value={again}
            onValue={setAgain}
            errors={form.errors.fields.passwordAgain?.map((m) => m.replace(/^passwordAgain /, ''))}
          />
          <Actions>
            <button type="submit" class="primary" disabled={form.busy}>
              Set password
            </button>
          </Actions>
        </form>
      )}
    </section>
  );
}
