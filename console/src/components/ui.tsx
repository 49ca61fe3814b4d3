// Small shared pieces: page heading and title, copyable values, confirmations, error and gone
// states, status badges, pages of a list.
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';

import type { ApiError } from '../api/errors';
import { hasNavigated, Link } from '../lib/router';

/** The page's `<h1>`; sets the document title and takes the focus after a navigation. */
export function PageHeading({ title, children }: { title: string; children?: ComponentChildren }) {
  const ref = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    document.title = `${title} · Sluice`;
  }, [title]);
  useEffect(() => {
    // Focus the new page's heading after an in-app navigation (not on the first load), so that
    // keyboard and screen-reader users start at the top of what changed.
    if (hasNavigated()) ref.current?.focus();
  }, []);
  return (
    <div class="page-head">
      <h1 tabIndex={-1} ref={ref}>
        {title}
      </h1>
      {children && <div class="page-tools">{children}</div>}
    </div>
  );
}

let copyIds = 0;

/** A value to copy: a read-only input (its `value` is the value) and a Copy button. */
export function CopyField({ label, value, testid, secret }: { label: string; value: string; testid?: string; secret?: boolean }) {
  const [id] = useState(() => `copy-${++copyIds}`);
  const [said, setSaid] = useState('');
  const input = useRef<HTMLInputElement>(null);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(value);
      setSaid('Copied');
    } catch {
      // Clipboard API refused (e.g. plain http): select the text so the user can copy it.
      input.current?.select();
      setSaid(document.execCommand('copy') ? 'Copied' : 'Selected: press Ctrl+C to copy');
    }
    window.setTimeout(() => setSaid(''), 2500);
  };
  return (
    <div class="field copy">
      <label for={id}>{label}</label>
      <div class="copy-row">
        <input
          id={id}
          ref={input}
          readOnly
          value={value}
          data-testid={testid}
          class={secret ? 'mono secret' : 'mono'}
          onFocus={(e) => e.currentTarget.select()}
          spellcheck={false}
        />
        <button type="button" onClick={copy} aria-label={`Copy ${label}`}>
          Copy
        </button>
      </div>
      <span class="copied" aria-live="polite">
        {said}
      </span>
    </div>
  );
}

/**
 * A button that asks before it acts: the first press shows what will happen with a confirm and a
 * cancel button (focus moves to cancel, the safe choice).
 */
export function ConfirmButton({
  label,
  question,
  confirmLabel,
  onConfirm,
  danger,
}: {
  label: string;
  question: string;
  confirmLabel: string;
  onConfirm: () => Promise<void> | void;
  danger?: boolean;
}) {
  const [asking, setAsking] = useState(false);
  const [busy, setBusy] = useState(false);
  const cancel = useRef<HTMLButtonElement>(null);
  const opener = useRef<HTMLButtonElement>(null);
  const wasAsking = useRef(false);
  useEffect(() => {
    // Focus follows the question: to Cancel when it appears, back to the button when it goes
    // (unless the action removed the button, as a delete does).
    if (asking) cancel.current?.focus();
    else if (wasAsking.current) opener.current?.focus();
    wasAsking.current = asking;
  }, [asking]);
  if (!asking) {
    return (
      <button type="button" ref={opener} onClick={() => setAsking(true)}>
        {label}
      </button>
    );
  }
  return (
    <span class="confirm" role="group" aria-label={question}>
      <span class="confirm-q">{question}</span>
      <button
        type="button"
        class={danger ? 'danger' : 'primary'}
        disabled={busy}
        onClick={async () => {
          setBusy(true);
          try {
            await onConfirm();
          } finally {
            setBusy(false);
            setAsking(false);
          }
        }}
      >
        {confirmLabel}
      </button>
      <button type="button" ref={cancel} onClick={() => setAsking(false)}>
        Cancel
      </button>
    </span>
  );
}

export function ErrorAlert({ error, onRetry }: { error: ApiError | undefined; onRetry?: () => void }) {
  if (!error) return null;
  return (
    <div class="alert" role="alert">
      {error.messages.map((m) => (
        <p key={m}>{m}</p>
      ))}
      {onRetry && (
        <button type="button" onClick={onRetry}>
          Try again
        </button>
      )}
    </div>
  );
}

/** What a page shows for a resource that does not exist (any more): deleted elsewhere, wrong link. */
export function Gone({ what, back, backLabel }: { what: string; back: string; backLabel: string }) {
  return (
    <section class="gone">
      <PageHeading title={`${what} not found`} />
      <p>
        This {what.toLowerCase()} does not exist any more: it may have been deleted, in another tab or by someone else.
      </p>
      <p>
        <Link href={back}>{backLabel}</Link>
      </p>
    </section>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p class="loading" role="status">
      Loading {what}…
    </p>
  );
}

/** A status word; `testid` goes on the element whose text is exactly the status. */
export function Status({ value, testid }: { value: string; testid?: string }) {
  return (
    <span class={`status status-${value.replace(/_/g, '-')}`} data-testid={testid}>
      {value}
    </span>
  );
}

export function Pager({
  skip,
  limit,
  total,
  onPage,
  what,
}: {
  skip: number;
  limit: number;
  total: number;
  onPage: (skip: number) => void;
  what: string;
}) {
  if (total <= limit && skip === 0) return <p class="count">{`${total} ${what}`}</p>;
  const first = total === 0 ? 0 : skip + 1;
  const last = Math.min(skip + limit, total);
  return (
    <nav class="pager" aria-label={`Pages of ${what}`}>
      <button type="button" disabled={skip === 0} onClick={() => onPage(Math.max(0, skip - limit))}>
        Previous page
      </button>
      <span aria-live="polite">
        {first}–{last} of {total}
      </span>
      <button type="button" disabled={skip + limit >= total} onClick={() => onPage(skip + limit)}>
        Next page
      </button>
    </nav>
  );
}

/**
 * A region that scrolls sideways on narrow screens; focusable so the keyboard can scroll it. Its
 * name says "table" so it never repeats the name of the section around it.
 */
export function TableWrap({ label, children }: { label: string; children: ComponentChildren }) {
  return (
    <div class="table-wrap" role="region" aria-label={`${label} table`} tabIndex={0}>
      {children}
    </div>
  );
}

/**
 * A secret shown once. The API answers `null` in place of a raw secret when it replays the answer
 * of a repeated request (CONTRACT: Conventions, Idempotency-Key); then there is nothing to copy,
 * and `whenMissing` says how to get a new one.
 */
export function SecretField({
  label,
  value,
  testid,
  whenMissing,
}: {
  label: string;
  value: string | null;
  testid?: string;
  whenMissing: string;
}) {
  if (value) return <CopyField label={label} value={value} testid={testid} secret />;
  return (
    <div class="alert" role="alert">
      <p>
        {label}: not in this answer (it repeated an earlier request, and repeats never carry secrets). {whenMissing}
      </p>
    </div>
  );
}
