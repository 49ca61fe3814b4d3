// Uploading a VOD's source from the browser (CONTRACT: VOD; docs/vod.md, "Uploading"):
// create the VOD named after the file, send the file to `upload.url`, then `POST …/uploaded`.
//
// Sluice's own upload target (`…/upload/vod/<id>?expires=…&sig=…`) takes the file in
// `Content-Range: bytes <first>-<last>/<total>` chunks: a chunk that leaves the file incomplete is
// answered 202 with `{received, total}`, the last one 200. After a dropped connection the console
// asks how much has arrived (`Content-Range: bytes */<total>`, empty body: 202 with `{received}`)
// and goes on from there. An expired URL (403) is renewed with `POST …/heartbeat`. A presigned S3
// URL takes no Content-Range, so there the file goes in one PUT, restarted from 0 after a failure.
//
// XMLHttpRequest, not fetch: fetch reports no upload progress. The upload target is not the REST
// API, so the generated client has no part in it; the API calls around it go through the client.
import { api, type UploadTarget, type Vod } from '../api/client';
import { ApiError, asApiError, call } from '../api/errors';
import { createStore } from './store';

/** Bytes per chunk: big enough to keep the pipe full, small enough that a retry costs little. */
export const CHUNK_BYTES = 8 * 1024 * 1024;
const RETRY_FIRST_MS = 1000;
const RETRY_MAX_MS = 30_000;

export type UploadState = 'creating' | 'uploading' | 'retrying' | 'finishing' | 'done' | 'failed' | 'cancelled';

export interface Upload {
  key: string;
  slug: string;
  fileName: string;
  size: number;
  sent: number;
  state: UploadState;
  vodId?: string;
  /** What went wrong (failed) or why it waits (retrying). */
  message?: string;
  /** The VOD as `uploaded` answered. */
  vod?: Vod;
}

export const uploads = createStore<Upload[]>([]);

interface Running {
  xhr: XMLHttpRequest | null;
  cancelled: boolean;
  wake: (() => void) | null;
}
const running = new Map<string, Running>();
let keys = 0;

function patch(key: string, change: Partial<Upload>): void {
  uploads.update((list) => list.map((u) => (u.key === key ? { ...u, ...change } : u)));
}

/** Chooses a file: the upload starts at once. */
export function startUpload(slug: string, file: File): string {
  const key = `up-${++keys}`;
  uploads.update((list) => [
    ...list,
    { key, slug, fileName: file.name, size: file.size, sent: 0, state: 'creating' },
  ]);
  const run: Running = { xhr: null, cancelled: false, wake: null };
  running.set(key, run);
  void drive(key, slug, file, run);
  return key;
}

export async function cancelUpload(key: string): Promise<void> {
  const run = running.get(key);
  const upload = uploads.get().find((u) => u.key === key);
  if (run) {
    run.cancelled = true;
    run.xhr?.abort();
    run.wake?.();
  }
  if (upload?.vodId && upload.state !== 'done') {
    await call(api.deleteVod({ path: { slug: upload.slug, id: upload.vodId } }));
  }
  patch(key, { state: 'cancelled', message: undefined });
}

export function dismissUpload(key: string): void {
  uploads.update((list) => list.filter((u) => u.key !== key));
}

/** Wakes an upload waiting to retry (the browser is back online, or the user asked). */
export function retryNow(key?: string): void {
  for (const [k, run] of running) if (!key || k === key) run.wake?.();
}
window.addEventListener('online', () => retryNow());
window.addEventListener('beforeunload', (e) => {
  if (uploads.get().some((u) => ['creating', 'uploading', 'retrying', 'finishing'].includes(u.state))) {
    e.preventDefault();
  }
});

class Cancelled extends Error {}

async function drive(key: string, slug: string, file: File, run: Running): Promise<void> {
  try {
    const name = file.name.slice(0, 100) || 'Untitled';
    const created = await call(
      api.createVod({ path: { slug }, body: { name, filename: file.name.slice(0, 255) || 'upload' } }),
    );
    const id = created.vod._id;
    patch(key, { vodId: id, state: 'uploading' });
    if (run.cancelled) throw new Cancelled();
    const target = (found: UploadTarget | null): UploadTarget => {
      if (!found) throw new Error('the server gave no upload URL');
      return found;
    };
    const renew = async () => target((await call(api.vodUploadHeartbeat({ path: { slug, id } }))).upload);
    await send(key, file, target(created.upload), renew, run);
    patch(key, { state: 'finishing', sent: file.size, message: undefined });
    const vod = await call(api.markVodUploaded({ path: { slug, id } }));
    patch(key, { state: 'done', vod, message: vod.status === 'failed' ? (vod.error ?? 'the file was refused') : undefined });
  } catch (e) {
    if (e instanceof Cancelled || run.cancelled) return;
    patch(key, { state: 'failed', message: asApiError(e).messages.join(' ') });
  } finally {
    running.delete(key);
  }
}

/** Sluice's own target takes Content-Range chunks; anything else (S3) takes one plain PUT. */
const resumable = (url: string) => /\/upload\/vod\/[^/]+$/.test(new URL(url, window.location.href).pathname);

/** Refusals other than a dropped connection are retried this many times in a row, then final. */
const MAX_REFUSALS = 10;

async function send(key: string, file: File, first: UploadTarget, renew: () => Promise<UploadTarget>, run: Running): Promise<void> {
  let target = first;
  let offset = 0;
  let delay = RETRY_FIRST_MS;
  let refusals = 0;
  const chunked = resumable(target.url) && file.size > 0;
  for (;;) {
    if (run.cancelled) throw new Cancelled();
    try {
      if (!chunked) {
        const r = await put(run, target.url, file, {}, (n) => patch(key, { sent: n }));
        if (r.status >= 200 && r.status < 300) return;
        throw refusal(r);
      }
      const last = Math.min(offset + CHUNK_BYTES, file.size) - 1;
      const r = await put(
        run,
        target.url,
        file.slice(offset, last + 1),
        { 'Content-Range': `bytes ${offset}-${last}/${file.size}` },
        (n) => patch(key, { sent: offset + n }),
      );
      if (r.status === 200) return;
      if (r.status === 202 || r.status === 416) {
        offset = received(r) ?? (await ask(run, target.url, file.size));
        patch(key, { sent: offset, state: 'uploading', message: undefined });
        delay = RETRY_FIRST_MS;
        refusals = 0;
        continue;
      }
      throw refusal(r);
    } catch (e) {
      if (run.cancelled) throw new Cancelled();
      const err = asApiError(e);
      if (err.status === 403) {
        // The URL expired (it lives an hour): a heartbeat hands out a fresh one.
        target = await renew();
        continue;
      }
      if (err.status !== 0 && err.status !== 400 && err.status < 500) throw err; // 409, 413: final
      if (err.status !== 0 && ++refusals > MAX_REFUSALS) throw err;
      // Dropped connection (0), an interrupted body (400), a server hiccup (5xx): wait, then ask
      // the server how much arrived and go on from there.
      patch(key, { state: 'retrying', message: `${err.messages.join(' ')} Retrying in ${Math.round(delay / 1000)} s…` });
      await sleep(delay, run);
      delay = Math.min(delay * 2, RETRY_MAX_MS);
      if (chunked) {
        try {
          offset = await ask(run, target.url, file.size);
          patch(key, { sent: offset, state: 'uploading', message: undefined });
        } catch (again) {
          if (asApiError(again).status === 403) target = await renew();
          // Otherwise the next round fails the same way and waits longer.
        }
      } else {
        patch(key, { sent: 0, state: 'uploading', message: undefined });
      }
    }
  }
}

// How many bytes the server holds: `Content-Range: bytes */<total>` with an empty body.
async function ask(run: Running, url: string, total: number): Promise<number> {
  const r = await put(run, url, null, { 'Content-Range': `bytes */${total}` });
  if (r.status === 202 || r.status === 200) return received(r) ?? 0;
  throw refusal(r);
}

interface Answer {
  status: number;
  body: unknown;
  range: string | null;
}

/** `{received}` of the body, else the `Range: bytes=0-<last>` header. */
function received(r: Answer): number | null {
  const body = r.body as { received?: unknown } | null;
  if (body && typeof body.received === 'number') return body.received;
  const m = r.range ? /bytes=0-(\d+)/.exec(r.range) : null;
  return m?.[1] ? Number(m[1]) + 1 : null;
}

function refusal(r: Answer): ApiError {
  const body = r.body as { message?: unknown } | null;
  const message = body && typeof body.message === 'string' ? body.message : `the upload target answered ${r.status}`;
  return new ApiError(r.status, [message]);
}

function put(
  run: Running,
  url: string,
  body: Blob | null,
  headers: Record<string, string>,
  progress?: (sent: number) => void,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    run.xhr = xhr;
    xhr.open('PUT', url);
    for (const [k, v] of Object.entries(headers)) xhr.setRequestHeader(k, v);
    if (progress) xhr.upload.onprogress = (e) => progress(e.loaded);
    xhr.onload = () => {
      run.xhr = null;
      let parsed: unknown = null;
      try {
        parsed = xhr.responseText ? JSON.parse(xhr.responseText) : null;
      } catch {
        parsed = xhr.responseText;
      }
      // `Range` is exposed to scripts only on the answers that carry it (202, 416); asking for it
      // on others makes the browser log an error.
      const range = xhr.status === 202 || xhr.status === 416 ? xhr.getResponseHeader('Range') : null;
      resolve({ status: xhr.status, body: parsed, range });
    };
    xhr.onerror = () => {
      run.xhr = null;
      reject(new ApiError(0, ['The connection dropped.']));
    };
    xhr.ontimeout = xhr.onerror;
    xhr.onabort = () => {
      run.xhr = null;
      reject(new Cancelled());
    };
    xhr.send(body);
  });
}

function sleep(ms: number, run: Running): Promise<void> {
  return new Promise((resolve) => {
    const t = window.setTimeout(done, ms);
    function done() {
      window.clearTimeout(t);
      run.wake = null;
      resolve();
    }
    run.wake = done;
  });
}
