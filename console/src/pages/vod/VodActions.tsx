import { useState } from 'preact/hooks';

import { api, type Project, type Vod } from '../../api/client';
import { asApiError, call } from '../../api/errors';
import { ConfirmButton } from '../../components/ui';

const CANCELLABLE = ['pending_upload', 'uploaded', 'queued', 'processing'];

/**
 * Cancel (before it is complete) or archive (once complete): both are `DELETE /vod/<id>`.
 * Rendered for members and admins only.
 */
export function VodRowActions({ project, vod, onChanged }: { project: Project; vod: Vod; onChanged: (v: Vod) => void }) {
  const [error, setError] = useState<string | null>(null);
  const del = async () => {
    setError(null);
    try {
      onChanged(await call(api.deleteVod({ path: { slug: project.slug, id: vod._id } })));
    } catch (e) {
      setError(asApiError(e).messages.join(' '));
    }
  };
  let button = null;
  if (CANCELLABLE.includes(vod.status)) {
    button = (
      <ConfirmButton
        label={`Cancel ${vod.name}`}
        question="Cancel it? Its files are removed."
        confirmLabel="Cancel VOD"
        danger
        onConfirm={del}
      />
    );
  } else if (vod.status === 'complete' && !vod.archivedAt) {
    button = (
      <ConfirmButton
        label={`Archive ${vod.name}`}
        question="Archive it? It leaves the list and stops playing."
        confirmLabel="Archive"
        danger
        onConfirm={del}
      />
    );
  }
  return (
    <div class="row-actions">
      {button}
      {error && (
        <p class="field-error" role="alert">
          {error}
        </p>
      )}
    </div>
  );
}
