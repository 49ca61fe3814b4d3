// Push credentials exist only in the create and rotate answers. They are handed from the create
// form to the stream page through memory — never storage — and the page takes them once: leaving
// the page forgets them.
import type { StreamWithCredentials } from '../api/client';

const handoff = new Map<string, StreamWithCredentials>();

export function handOver(stream: StreamWithCredentials): void {
  handoff.set(stream._id, stream);
}

export function takeOver(id: string): StreamWithCredentials | undefined {
  const s = handoff.get(id);
  handoff.delete(id);
  return s;
}
