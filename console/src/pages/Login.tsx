import { useState } from 'preact/hooks';

import { Actions, FormAlert, TextField, useForm } from '../components/form';
import { PageHeading } from '../components/ui';
import { signIn } from '../lib/session';

/** Sign-in, shown in place of whatever page needed it; that page comes back once signed in. */
export function Login({ notice }: { notice?: string | undefined }) {
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const form = useForm(['email', 'password']);
  return (
    <section class="card auth">
      <PageHeading title="Sign in" />
      {notice && (
        <p class="notice" role="status">
          {notice}
        </p>
      )}
      <form noValidate
        onSubmit={(e) => {
          e.preventDefault();
          void form.submit(() => signIn(email.trim(), password));
        }}
      >
        <FormAlert messages={form.errors.general} />
        <TextField
          id="login-email"
          label="E-mail"
          type="email"
          autocomplete="username"
          required
          value={email}
          onValue={setEmail}
          errors={form.errors.fields.email}
          testid="login-email"
        />
        <TextField
          id="login-password"
          label="Password"
          type="password"
          autocomplete="current-password"
          required
          value={password}
          onValue={setPassword}
          errors={form.errors.fields.password}
          testid="login-password"
        />
        <Actions>
          <button type="submit" class="primary" disabled={form.busy} data-testid="login-submit">
            {form.busy ? 'Signing in…' : 'Sign in'}
          </button>
        </Actions>
      </form>
    </section>
  );
}
