// Pieces of the frame shared by the signed-in pages.
import { Link } from '../lib/router';

const LAST_PROJECT = 'sluice.console.project';

export function rememberProject(slug: string): void {
  try {
    window.localStorage.setItem(LAST_PROJECT, slug);
  } catch {
    // Storage refused (private mode): the console starts on the first project instead.
  }
}

export function lastProject(): string | null {
  try {
    return window.localStorage.getItem(LAST_PROJECT);
  } catch {
    return null;
  }
}

export function UserMenu({ email, onSignOut }: { email: string; onSignOut: () => void }) {
  return (
    <div class="user">
      <span class="who" title="Signed in as">
        {email}
      </span>
      <Link href="/account">Account</Link>
      <Link href="/projects">Projects</Link>
      <button type="button" onClick={onSignOut}>
        Sign out
      </button>
    </div>
  );
}

