// Form pieces: every control has a label, and the server's messages appear beside the field they
// name (`aria-describedby`, `aria-invalid`) or, when they name none, in an alert above the form.
import type { ComponentChildren, InputHTMLAttributes } from 'preact';
import { useState } from 'preact/hooks';

import { ApiError, asApiError, sortErrors, type SortedErrors } from '../api/errors';

const NO_ERRORS: SortedErrors = { fields: {}, general: [] };

export interface FormState {
  errors: SortedErrors;
  busy: boolean;
  /** Runs `action`; a failure is sorted onto `fields`. Returns whether it succeeded. */
  submit: (action: () => Promise<void>) => Promise<boolean>;
  clear: () => void;
  fail: (error: ApiError) => void;
}

export function useForm(fields: readonly string[]): FormState {
  const [errors, setErrors] = useState<SortedErrors>(NO_ERRORS);
  const [busy, setBusy] = useState(false);
  const fail = (e: ApiError) => setErrors(sortErrors(e, fields));
  return {
    errors,
    busy,
    clear: () => setErrors(NO_ERRORS),
    fail,
    async submit(action) {
      setBusy(true);
      setErrors(NO_ERRORS);
      try {
        await action();
        return true;
      } catch (e) {
        fail(asApiError(e));
        // Take the keyboard to the first field the server complained about.
        window.requestAnimationFrame(() => document.querySelector<HTMLElement>('main [aria-invalid="true"]')?.focus());
        return false;
      } finally {
        setBusy(false);
      }
    },
  };
}

export function FormAlert({ messages }: { messages: string[] }) {
  if (messages.length === 0) return null;
  return (
    <div class="alert" role="alert">
      {messages.length === 1 ? (
        <p>{messages[0]}</p>
      ) : (
        <ul>
          {messages.map((m) => (
            <li key={m}>{m}</li>
          ))}
        </ul>
      )}
    </div>
  );
}

function FieldErrors({ id, messages }: { id: string; messages: string[] | undefined }) {
  if (!messages || messages.length === 0) return null;
  return (
    <div id={id} class="field-error">
      {messages.map((m) => (
        <p key={m}>{m}</p>
      ))}
    </div>
  );
}

type InputProps = Omit<InputHTMLAttributes<HTMLInputElement>, 'onInput' | 'value' | 'label' | 'id'>;

export function TextField({
  id,
  label,
  value,
  onValue,
  errors,
  hint,
  testid,
  ...rest
}: InputProps & {
  id: string;
  label: string;
  value: string;
  onValue: (v: string) => void;
  errors?: string[] | undefined;
  hint?: string;
  testid?: string;
}) {
  const errId = `${id}-error`;
  const hintId = `${id}-hint`;
  const described = [errors?.length ? errId : '', hint ? hintId : ''].filter(Boolean).join(' ') || undefined;
  return (
    <div class="field">
      <label for={id}>{label}</label>
      <input
        id={id}
        name={id}
        value={value}
        onInput={(e) => onValue(e.currentTarget.value)}
        aria-invalid={errors?.length ? true : undefined}
        aria-describedby={described}
        data-testid={testid}
        {...rest}
      />
      {hint && (
        <p id={hintId} class="hint">
          {hint}
        </p>
      )}
      <FieldErrors id={errId} messages={errors} />
    </div>
  );
}

export function SelectField<T extends string>({
  id,
  label,
  value,
  options,
  onValue,
  errors,
  disabled,
}: {
  id: string;
  label: string;
  value: T;
  options: readonly { value: T; label: string }[];
  onValue: (v: T) => void;
  errors?: string[] | undefined;
  disabled?: boolean;
}) {
  const errId = `${id}-error`;
  return (
    <div class="field">
      <label for={id}>{label}</label>
      <select
        id={id}
        value={value}
        disabled={disabled}
        onChange={(e) => onValue(e.currentTarget.value as T)}
        aria-invalid={errors?.length ? true : undefined}
        aria-describedby={errors?.length ? errId : undefined}
      >
        {options.map((o) => (
          <option key={o.value} value={o.value}>
            {o.label}
          </option>
        ))}
      </select>
      <FieldErrors id={errId} messages={errors} />
    </div>
  );
}

export function CheckboxField({
  id,
  label,
  checked,
  onValue,
  errors,
  testid,
  disabled,
}: {
  id: string;
  label: string;
  checked: boolean;
  onValue: (v: boolean) => void;
  errors?: string[] | undefined;
  testid?: string;
  disabled?: boolean;
}) {
  const errId = `${id}-error`;
  return (
    <div class="field checkbox">
      <input
        type="checkbox"
        id={id}
        checked={checked}
        disabled={disabled}
        onChange={(e) => onValue(e.currentTarget.checked)}
        aria-invalid={errors?.length ? true : undefined}
        aria-describedby={errors?.length ? errId : undefined}
        data-testid={testid}
      />
      <label for={id}>{label}</label>
      <FieldErrors id={errId} messages={errors} />
    </div>
  );
}

/** A group of checkboxes for a list value (qualities, protocols, events, scopes). */
export function ChoiceGroup<T extends string>({
  id,
  legend,
  options,
  value,
  onValue,
  errors,
  describe,
}: {
  id: string;
  legend: string;
  options: readonly T[];
  value: readonly T[];
  onValue: (v: T[]) => void;
  errors?: string[] | undefined;
  describe?: (o: T) => string;
}) {
  const errId = `${id}-error`;
  const toggle = (o: T, on: boolean) => {
    const next = on ? [...value, o] : value.filter((x) => x !== o);
    // Keep the order of `options`, which is the server's order (qualities highest first).
    onValue(options.filter((x) => next.includes(x)));
  };
  return (
    <fieldset class="field choices" aria-describedby={errors?.length ? errId : undefined}>
      <legend>{legend}</legend>
      <div class="choice-list">
        {options.map((o) => (
          <div class="checkbox" key={o}>
            <input
              type="checkbox"
              id={`${id}-${safeId(o)}`}
              value={o}
              checked={value.includes(o)}
              onChange={(e) => toggle(o, e.currentTarget.checked)}
            />
            <label for={`${id}-${safeId(o)}`}>{describe ? describe(o) : o}</label>
          </div>
        ))}
      </div>
      <FieldErrors id={errId} messages={errors} />
    </fieldset>
  );
}

export function Actions({ children }: { children: ComponentChildren }) {
  return <div class="actions">{children}</div>;
}

/** An option as part of an element id (`streams:read` → `streams_read`, `*` → `all`). */
const safeId = (o: string) => (o === '*' ? 'all' : o.replace(/[^A-Za-z0-9_-]/g, '_'));
