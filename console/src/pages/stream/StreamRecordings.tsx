import { api, type Project } from '../../api/client';
import { call } from '../../api/errors';
import { ErrorAlert, Loading, Status, TableWrap } from '../../components/ui';
import { isVodEvent, useProjectEvents } from '../../events';
import { useAsync } from '../../lib/async';
import { dateTime, seconds } from '../../lib/format';
import { Link } from '../../lib/router';

const LIMIT = 50;

/** The stream's recordings: `GET /vod?streamId=`. */
export function StreamRecordings({ project, streamId }: { project: Project; streamId: string }) {
  const slug = project.slug;
  const list = useAsync(() => call(api.listVods({ path: { slug }, query: { streamId, limit: LIMIT } })), [slug, streamId]);
  // A recording appears when a session ends (`vod.complete`); VOD events do not name the stream.
  useProjectEvents(slug, (m) => {
    if (m === 'resync' || (isVodEvent(m) && m.event === 'vod.complete')) list.reload();
  });
  return (
    <section class="card" aria-labelledby="rec-title">
      <h2 id="rec-title">Recordings</h2>
      <ErrorAlert error={list.error} onRetry={list.reload} />
      {!list.data && !list.error && <Loading what="recordings" />}
      {list.data &&
        (list.data.items.length === 0 ? (
          <p>No recordings. With recording on, each push session becomes a VOD when it ends.</p>
        ) : (
          <TableWrap label="Recordings">
            <table class="stack">
              <caption class="sr-only">Recordings of this stream</caption>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Status</th>
                  <th scope="col">Duration</th>
                  <th scope="col">Created</th>
                </tr>
              </thead>
              <tbody>
                {list.data.items.map((v) => (
                  <tr key={v._id}>
                    <td data-label="Name">
                      <Link href={`/p/${encodeURIComponent(slug)}/vod/${encodeURIComponent(v._id)}`}>{v.name}</Link>
                    </td>
                    <td data-label="Status">
                      <Status value={v.status} />
                    </td>
                    <td data-label="Duration">{seconds(v.duration)}</td>
                    <td data-label="Created">{dateTime(v.createdAt)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
            {list.data.total > LIMIT && (
              <p class="hint">
                The first {LIMIT} of {list.data.total}.
              </p>
            )}
          </TableWrap>
        ))}
    </section>
  );
}
