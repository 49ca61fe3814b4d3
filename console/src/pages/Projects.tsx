import { useState } from 'preact/hooks';

import { api } from '../api/client';
import { call } from '../api/errors';
import { Actions, FormAlert, TextField, useForm } from '../components/form';
import { PageHeading, TableWrap } from '../components/ui';
import { dateTime } from '../lib/format';
import { Link, navigate } from '../lib/router';
import { loadProjects, projects } from '../lib/session';
import { useStore } from '../lib/store';

/** The user's projects, and a new one (its creator becomes its admin). */
export function Projects() {
  const list = useStore(projects) ?? [];
  const [slug, setSlug] = useState('');
  const [name, setName] = useState('');
  const form = useForm(['slug', 'name']);
  return (
    <section>
      <PageHeading title="Projects" />
      {list.length === 0 ? (
        <p>You are not a member of any project yet. Create one below, or ask an admin to invite you.</p>
      ) : (
        <TableWrap label="Your projects">
          <table class="stack">
            <caption class="sr-only">Your projects</caption>
            <thead>
              <tr>
                <th scope="col">Project</th>
                <th scope="col">Slug</th>
                <th scope="col">Your role</th>
                <th scope="col">Created</th>
              </tr>
            </thead>
            <tbody>
              {list.map((p) => (
                <tr key={p._id}>
                  <td data-label="Project">
                    <Link href={`/p/${encodeURIComponent(p.slug)}/streams`}>{p.name}</Link>
                  </td>
                  <td data-label="Slug" class="mono">{p.slug}</td>
                  <td data-label="Your role">{p.role ?? '—'}</td>
                  <td data-label="Created">{dateTime(p.createdAt)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
      )}
      <section class="card" aria-labelledby="new-project">
        <h2 id="new-project">New project</h2>
        <form noValidate
          onSubmit={(e) => {
            e.preventDefault();
            void form.submit(async () => {
              const created = await call(
                api.createProject({ body: { slug: slug.trim(), name: name.trim() ? name.trim() : null } }),
              );
              await loadProjects();
              navigate(`/p/${encodeURIComponent(created.slug)}/streams`);
            });
          }}
        >
          <FormAlert messages={form.errors.general} />
          <TextField
            id="slug"
            label="Slug"
            required
            value={slug}
            onValue={setSlug}
            hint="3–40 lowercase letters, digits and inner dashes; it appears in API paths."
            errors={form.errors.fields.slug}
            autocomplete="off"
          />
          <TextField
            id="name"
            label="Display name (optional)"
            value={name}
            onValue={setName}
            errors={form.errors.fields.name}
            autocomplete="off"
          />
          <Actions>
            <button type="submit" class="primary" disabled={form.busy}>
              Create project
            </button>
          </Actions>
        </form>
      </section>
    </section>
  );
}
