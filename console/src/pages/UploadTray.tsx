import { Link } from '../lib/router';
import { bytes, percent } from '../lib/format';
import { useStore } from '../lib/store';
import { cancelUpload, dismissUpload, retryNow, type Upload, uploads } from '../lib/upload';
import { Status } from '../components/ui';
import { useState } from 'preact/hooks';
import { asApiError } from '../api/errors';

const ACTIVE = ['creating', 'uploading', 'retrying', 'finishing'];

/**
 * The uploads of this browser tab: they go on while the user moves around the console. On the
 * VOD list they are a section of the page; elsewhere a complementary landmark after it.
 */
export function UploadTray({ inPage = false }: { inPage?: boolean }) {
  const list = useStore(uploads);
  if (list.length === 0) return null;
  const items = (
    <>
      <h2 id="uploads-title">Uploads</h2>
      <ul>
        {list.map((u) => (
          <UploadItem key={u.key} upload={u} />
        ))}
      </ul>
    </>
  );
  return inPage ? (
    <section class="uploads card" aria-labelledby="uploads-title">
      {items}
    </section>
  ) : (
    <aside class="uploads card" aria-labelledby="uploads-title">
      {items}
    </aside>
  );
}

function UploadItem({ upload: u }: { upload: Upload }) {
  const [error, setError] = useState<string | null>(null);
  const pct = percent(u.sent, u.size);
  const active = ACTIVE.includes(u.state);
  return (
    <li class={`upload upload-${u.state}`}>
      <div class="upload-head">
        <span class="upload-name">
          {u.vodId ? <Link href={`/p/${encodeURIComponent(u.slug)}/vod/${encodeURIComponent(u.vodId)}`}>{u.fileName}</Link> : u.fileName}
        </span>
        <span class="upload-state">{label(u)}</span>
      </div>
      <div class="progress" data-testid="upload-progress">
        <progress max={Math.max(u.size, 1)} value={u.size === 0 && u.state === 'done' ? 1 : u.sent} aria-label={`Upload of ${u.fileName}`} />
        <span class="progress-text">
          {bytes(u.sent)} of {bytes(u.size)} · {u.state === 'done' ? 100 : pct}%
        </span>
      </div>
      {u.message && (
        <p class={u.state === 'failed' ? 'field-error' : 'hint'} role={u.state === 'failed' ? 'alert' : undefined}>
          {u.message}
        </p>
      )}
      {error && (
        <p class="field-error" role="alert">
          {error}
        </p>
      )}
      <div class="actions">
        {u.state === 'retrying' && (
          <button type="button" onClick={() => retryNow(u.key)}>
            Retry now
          </button>
        )}
        {active && (
          <button
            type="button"
            onClick={() => {
              setError(null);
              cancelUpload(u.key).catch((e: unknown) => setError(asApiError(e).messages.join(' ')));
            }}
          >
            Cancel upload of {u.fileName}
          </button>
        )}
        {!active && (
          <button type="button" onClick={() => dismissUpload(u.key)}>
            Dismiss {u.fileName}
          </button>
        )}
      </div>
    </li>
  );
}

function label(u: Upload) {
  switch (u.state) {
    case 'creating':
      return 'creating the VOD…';
    case 'uploading':
      return 'uploading';
    case 'retrying':
      return 'connection lost, will resume';
    case 'finishing':
      return 'checking the file…';
    case 'done':
      return u.vod ? (
        <>
          uploaded, now <Status value={u.vod.status} />
        </>
      ) : (
        'uploaded'
      );
    case 'failed':
      return 'failed';
    case 'cancelled':
      return 'cancelled';
  }
}
