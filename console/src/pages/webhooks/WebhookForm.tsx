import { useState } from 'preact/hooks';

import { api, type EventFilter, type Project } from '../../api/client';
import { call } from '../../api/errors';
import { Actions, CheckboxField, ChoiceGroup, FormAlert, TextField, useForm } from '../../components/form';
import { ErrorAlert } from '../../components/ui';
import { useAsync } from '../../lib/async';

export interface WebhookValues {
  url: string;
  description: string;
  events: EventFilter[];
  enabled: boolean;
}

export const ALL_EVENTS: EventFilter = '*';

/** Create and edit share this form: url, description, the events (or every event), enabled. */
export function WebhookForm({
  project,
  initial,
  submitLabel,
  onSubmit,
  onCancel,
}: {
  project: Project;
  initial: WebhookValues;
  submitLabel: string;
  onSubmit: (v: WebhookValues) => Promise<void>;
  onCancel?: () => void;
}) {
  const [values, setValues] = useState<WebhookValues>(initial);
  const catalog = useAsync(() => call(api.listWebhookEvents({ path: { slug: project.slug } })), [project.slug]);
  const form = useForm(['url', 'description', 'events', 'enabled']);
  const every = values.events.includes(ALL_EVENTS);
  const set = (change: Partial<WebhookValues>) => setValues((v) => ({ ...v, ...change }));
  const id = initial.url ? 'edit' : 'new';

  return (
    <form noValidate
      onSubmit={(e) => {
        e.preventDefault();
        void form.submit(() => onSubmit({ ...values, url: values.url.trim() }));
      }}
    >
      <FormAlert messages={form.errors.general} />
      <TextField
        id={`${id}-webhook-url`}
        label="Endpoint URL"
        type="url"
        required
        value={values.url}
        onValue={(url) => set({ url })}
        errors={form.errors.fields.url}
        testid="webhook-url"
        hint="https:// (plain http only when the server runs in development mode)."
        autocomplete="off"
      />
      <TextField
        id={`${id}-webhook-description`}
        label="Description (optional)"
        maxLength={200}
        value={values.description}
        onValue={(description) => set({ description })}
        errors={form.errors.fields.description}
        autocomplete="off"
      />
      <CheckboxField
        id={`${id}-webhook-all`}
        label="Every event, including ones added later"
        checked={every}
        onValue={(on) => set({ events: on ? [ALL_EVENTS] : [] })}
      />
      <ErrorAlert error={catalog.error} onRetry={catalog.reload} />
      {!every && catalog.data && (
        <ChoiceGroup
          id={`${id}-webhook-events`}
          legend="Events"
          options={catalog.data.events as EventFilter[]}
          value={values.events}
          onValue={(events) => set({ events })}
          errors={form.errors.fields.events}
        />
      )}
      {every && form.errors.fields.events && <FormAlert messages={form.errors.fields.events} />}
      <CheckboxField
        id={`${id}-webhook-enabled`}
        label="Enabled (deliveries are sent)"
        checked={values.enabled}
        onValue={(enabled) => set({ enabled })}
        errors={form.errors.fields.enabled}
      />
      <Actions>
        <button type="submit" class="primary" disabled={form.busy} data-testid="webhook-save">
          {submitLabel}
        </button>
        {onCancel && (
          <button type="button" onClick={onCancel}>
            Cancel
          </button>
        )}
      </Actions>
    </form>
  );
}
