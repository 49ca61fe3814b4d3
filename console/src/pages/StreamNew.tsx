import { useState } from 'preact/hooks';

import { api, type Project, type Protocol, type Quality } from '../api/client';
import { call } from '../api/errors';
import { Actions, CheckboxField, ChoiceGroup, FormAlert, TextField, useForm } from '../components/form';
import { PageHeading } from '../components/ui';
import { PROTOCOL_LABELS, PROTOCOLS, QUALITIES } from '../lib/catalog';
import { handOver } from '../lib/credentials';
import { Link, navigate } from '../lib/router';
import { canWrite } from '../lib/session';

const FIELDS = ['name', 'qualities', 'protocols', 'vodEnabled', 'dvrEnabled', 'dvrDuration', 'reconnectWindow', 'drmEnabled'] as const;

export function StreamNew({ project }: { project: Project }) {
  const base = `/p/${encodeURIComponent(project.slug)}/streams`;
  const [name, setName] = useState('');
  const [qualities, setQualities] = useState<Quality[]>(['720p', '480p']);
  const [protocols, setProtocols] = useState<Protocol[]>(['llhls']);
  const [vodEnabled, setVod] = useState(false);
  const [dvrEnabled, setDvr] = useState(false);
  const [dvrDuration, setDvrDuration] = useState('3600');
  const [reconnectWindow, setReconnectWindow] = useState('10');
  const [drmEnabled, setDrm] = useState(false);
  const form = useForm(FIELDS);

  if (!canWrite(project)) {
    return (
      <section>
        <PageHeading title="New stream" />
        <p>Your role in this project ({project.role ?? 'none'}) cannot create streams.</p>
        <Link href={base}>Back to the streams</Link>
      </section>
    );
  }

  return (
    <section>
      <PageHeading title="New stream" />
      <form noValidate
        class="card"
        onSubmit={(e) => {
          e.preventDefault();
          void form.submit(async () => {
            const created = await call(
              api.createStream({
                path: { slug: project.slug },
                body: {
                  name: name.trim(),
                  qualities,
                  protocols,
                  vodEnabled,
                  dvrEnabled,
                  // An empty or non-numeric duration goes to the server as is, which names the field.
                  dvrDuration: dvrEnabled ? Number(dvrDuration) : null,
                  reconnectWindow: Number(reconnectWindow),
                  drmEnabled,
                },
              }),
            );
            handOver(created);
            navigate(`${base}/${encodeURIComponent(created._id)}`);
          });
        }}
      >
        <FormAlert messages={form.errors.general} />
        <TextField
          id="name"
          label="Name"
          required
          maxLength={100}
          value={name}
          onValue={setName}
          errors={form.errors.fields.name}
          testid="stream-name"
          autocomplete="off"
        />
        <ChoiceGroup
          id="qualities"
          legend="Qualities (transcoded renditions; those above the source are left out)"
          options={QUALITIES}
          value={qualities}
          onValue={setQualities}
          errors={form.errors.fields.qualities}
        />
        <ChoiceGroup
          id="protocols"
          legend="Playback protocols"
          options={PROTOCOLS}
          value={protocols}
          onValue={setProtocols}
          describe={(p) => PROTOCOL_LABELS[p]}
          errors={form.errors.fields.protocols}
        />
        <CheckboxField
          id="vodEnabled"
          label="Record each session as a VOD"
          checked={vodEnabled}
          onValue={setVod}
          errors={form.errors.fields.vodEnabled}
        />
        <CheckboxField id="dvrEnabled" label="DVR (viewers can seek back)" checked={dvrEnabled} onValue={setDvr} errors={form.errors.fields.dvrEnabled} />
        {dvrEnabled && (
          <TextField
            id="dvrDuration"
            label="DVR window (seconds)"
            type="number"
            inputMode="numeric"
            min={60}
            max={43200}
            step={1}
            value={dvrDuration}
            onValue={setDvrDuration}
            hint="60 to 43200 seconds (12 hours)."
            errors={form.errors.fields.dvrDuration}
          />
        )}
        <TextField
          id="reconnectWindow"
          label="Reconnect window (seconds)"
          type="number"
          inputMode="numeric"
          min={0}
          max={1800}
          step={1}
          value={reconnectWindow}
          onValue={setReconnectWindow}
          hint="How long the stream stays live, showing a slate, when the publisher drops: 0 to 1800 seconds."
          errors={form.errors.fields.reconnectWindow}
        />
        <CheckboxField
          id="drmEnabled"
          label="Encrypt segments (AES-128; pair it with signed playback)"
          checked={drmEnabled}
          onValue={setDrm}
          errors={form.errors.fields.drmEnabled}
        />
        <Actions>
          <button type="submit" class="primary" disabled={form.busy} data-testid="stream-save">
            {form.busy ? 'Creating…' : 'Create stream'}
          </button>
          <Link class="button" href={base}>
            Cancel
          </Link>
        </Actions>
      </form>
    </section>
  );
}
