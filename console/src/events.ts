// Following a project live through its event log (CONTRACT: Webhooks, "Event log"):
// `GET /v1/projects/<slug>/events` with `Accept: text/event-stream` streams one SSE message per
// event — `id:` the cursor, `event:` the event name, `data:` the webhook envelope
// `{id, event, createdAt, data}` whose `data` is the resource payload with the resource's `id`.
//
// One EventSource per project, shared by every page that listens. The browser reconnects by
// itself after a dropped connection and sends `Last-Event-ID`, so nothing is lost or repeated.
// When the server refuses the stream (an HTTP error closes an EventSource for good: the session
// expired, or the endpoint is not there), the feed checks the session — which refreshes it — and
// opens again after a back-off, resuming with `?after=<last cursor>`.
//
// Without a cursor the log starts at its oldest event (kept 7 days), and the API offers no way to
// start at its end; so the first connection skips what happened before the page opened it (by the
// server's clock, with a margin) instead of re-reading a record for every old event. Reconnects
// resume from the cursor and skip nothing.
//
// Pages react to an event by re-reading the record it names (the payload is a summary). While the
// feed is not open they poll instead (`useLiveFallback`), so statuses still move without a reload.
// This EventSource is the console's one request outside the generated client: the client's fetch
// cannot do what EventSource does (reconnect, Last-Event-ID) as simply.
import { useEffect, useRef } from 'preact/hooks';

import { api, type EventName, type StreamEventData, type VodEventData } from './api/client';
import { call } from './api/errors';
import { serverNow } from './lib/clock';
import { createStore, type Store, useStore } from './lib/store';

export const STREAM_EVENTS = [
  'stream.created',
  'stream.live',
  'stream.ended',
  'stream.disabled',
  'stream.input_switched',
] as const satisfies readonly EventName[];

export const VOD_EVENTS = [
  'vod.uploaded',
  'vod.processing',
  'vod.complete',
  'vod.failed',
  'vod.cancelled',
] as const satisfies readonly EventName[];

const ALL_EVENTS: readonly EventName[] = [...STREAM_EVENTS, ...VOD_EVENTS];

export type StreamEvent = {
  cursor: string;
  id: string;
  event: (typeof STREAM_EVENTS)[number];
  createdAt: string;
  data: StreamEventData;
};
export type VodEvent = {
  cursor: string;
  id: string;
  event: (typeof VOD_EVENTS)[number];
  createdAt: string;
  data: VodEventData;
};
export type ProjectEvent = StreamEvent | VodEvent;

/** An event, or `resync`: the feed came back after a gap, so what is shown may be stale. */
export type FeedMessage = ProjectEvent | 'resync';
export type FeedState = 'connecting' | 'open' | 'down';

const RETRY_FIRST_MS = 2_000;
/** Events this much older than the feed's first opening still count (clock granularity, races). */
const BACKLOG_MARGIN_MS = 30_000;
const RETRY_MAX_MS = 60_000;
/** How long a feed nobody listens to stays open, waiting for the next page. */
const LINGER_MS = 10_000;

class Feed {
  readonly state: Store<FeedState> = createStore<FeedState>('connecting');
  private readonly listeners = new Set<(m: FeedMessage) => void>();
  private source: EventSource | null = null;
  private cursor: string | null = null;
  private retryMs = RETRY_FIRST_MS;
  private timer: number | undefined;
  private linger: number | undefined;
  private everOpen = false;
  private wasDown = false;
  /** Events created before this (server time) are history, not news. */
  private since = serverNow() - BACKLOG_MARGIN_MS;

  constructor(private readonly slug: string) {}

  add(listener: (m: FeedMessage) => void): () => void {
    this.listeners.add(listener);
    if (!this.source && this.timer === undefined) {
      // Nobody listened for a while: pages load fresh data, so what happened meanwhile is history.
      this.since = serverNow() - BACKLOG_MARGIN_MS;
      this.open();
    }
    window.clearTimeout(this.linger);
    return () => {
      this.listeners.delete(listener);
      // Pages come and go on every navigation: keep the connection a moment for the next one
      // rather than opening a new follower (the server caps them per user).
      if (this.listeners.size === 0) {
        window.clearTimeout(this.linger);
        this.linger = window.setTimeout(() => this.listeners.size === 0 && this.close(), LINGER_MS);
      }
    };
  }

  private url(): string {
    const base = `/v1/projects/${encodeURIComponent(this.slug)}/events`;
    return this.cursor ? `${base}?after=${encodeURIComponent(this.cursor)}` : base;
  }

  private open(): void {
    this.timer = undefined;
    const source = new EventSource(this.url());
    this.source = source;
    this.state.set('connecting');
    source.onopen = () => {
      this.retryMs = RETRY_FIRST_MS;
      this.state.set('open');
      // Back after a gap that the cursor could not bridge (no cursor yet): let pages re-read.
      if (this.everOpen && this.wasDown && !this.cursor) this.emit('resync');
      this.everOpen = true;
      this.wasDown = false;
    };
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) this.refused();
      else {
        this.wasDown = true;
        this.state.set('connecting');
      }
    };
    const onMessage = (e: MessageEvent<string>) => this.receive(e);
    for (const name of ALL_EVENTS) source.addEventListener(name, onMessage);
  }

  private receive(e: MessageEvent<string>): void {
    if (e.lastEventId) this.cursor = e.lastEventId;
    let envelope: { id?: unknown; event?: unknown; createdAt?: unknown; data?: unknown };
    try {
      envelope = JSON.parse(e.data) as typeof envelope;
    } catch {
      console.error('events: a message that is not JSON', e.type, e.data);
      return;
    }
    const created = typeof envelope.createdAt === 'string' ? Date.parse(envelope.createdAt) : NaN;
    if (Number.isFinite(created) && created < this.since) return;
    const data = envelope.data as { id?: unknown } | undefined;
    if (!data || typeof data.id !== 'string') {
      console.error('events: a message without a resource id', e.type, e.data);
      return;
    }
    this.emit({
      cursor: e.lastEventId,
      id: String(envelope.id ?? ''),
      event: e.type,
      createdAt: String(envelope.createdAt ?? ''),
      data,
    } as ProjectEvent);
  }

  /** The server answered with an error, which ends an EventSource for good: check and retry. */
  private refused(): void {
    this.source?.close();
    this.source = null;
    this.wasDown = true;
    this.state.set('down');
    if (this.listeners.size === 0) return;
    const delay = this.retryMs;
    this.retryMs = Math.min(this.retryMs * 2, RETRY_MAX_MS);
    this.timer = window.setTimeout(() => {
      // A session that expired is refreshed by the client on this call's 401; one that cannot be
      // refreshed brings back the sign-in, and then nobody is listening any more.
      call(api.me()).then(
        () => this.listeners.size > 0 && this.open(),
        () => {
          if (this.listeners.size > 0) this.refused();
        },
      );
    }, delay);
  }

  private emit(m: FeedMessage): void {
    this.listeners.forEach((l) => {
      try {
        l(m);
      } catch (err) {
        console.error('events: a listener failed', err);
      }
    });
  }

  close(): void {
    window.clearTimeout(this.linger);
    window.clearTimeout(this.timer);
    this.timer = undefined;
    this.source?.close();
    this.source = null;
    this.state.set('connecting');
  }
}

const feeds = new Map<string, Feed>();

function feed(slug: string): Feed {
  let f = feeds.get(slug);
  if (!f) {
    f = new Feed(slug);
    feeds.set(slug, f);
  }
  return f;
}

/** Ends every feed now (signed out: the connections must not outlive the session). */
export function closeAllFeeds(): void {
  feeds.forEach((f) => f.close());
  feeds.clear();
}

/** Listens to a project's events until the returned function is called. */
export function subscribe(slug: string, listener: (m: FeedMessage) => void): () => void {
  return feed(slug).add(listener);
}

/** Calls `handler` for each event of the project (the latest handler, without resubscribing). */
export function useProjectEvents(slug: string, handler: (m: FeedMessage) => void): void {
  const latest = useRef(handler);
  latest.current = handler;
  useEffect(() => subscribe(slug, (m) => latest.current(m)), [slug]);
}

export function useFeedState(slug: string): FeedState {
  return useStore(feed(slug).state);
}

/**
 * While the project's feed is not open, calls `poll` every `ms` (when `active`), so that the
 * page still follows changes within a couple of seconds.
 */
export function useLiveFallback(slug: string, poll: () => void, active: boolean, ms = 2000): void {
  const state = useFeedState(slug);
  const latest = useRef(poll);
  latest.current = poll;
  useEffect(() => {
    if (state === 'open' || !active) return undefined;
    const t = window.setInterval(() => latest.current(), ms);
    return () => window.clearInterval(t);
  }, [state, active, ms]);
}

export const isStreamEvent = (m: FeedMessage): m is StreamEvent =>
  m !== 'resync' && (STREAM_EVENTS as readonly string[]).includes(m.event);
export const isVodEvent = (m: FeedMessage): m is VodEvent =>
  m !== 'resync' && (VOD_EVENTS as readonly string[]).includes(m.event);
