// The API's enumerations as values for forms. Each list is checked against the generated types
// both ways: a value the API drops fails the build (`satisfies`), and so does one it adds
// (`Exhaustive`), so the forms always offer exactly what the API accepts.
import type { EventFilter, Protocol, Quality, Role, Scope, VodStatus } from '../api/client';

type Exhaustive<All, Listed> = [Exclude<All, Listed>] extends [never] ? true : ['missing from the list:', Exclude<All, Listed>];
const exhaustive = <T extends true>(_: T) => undefined;

export const QUALITIES = ['2160p', '1440p', '1080p', '720p', '480p', '360p', '240p'] as const satisfies readonly Quality[];
exhaustive<Exhaustive<Quality, (typeof QUALITIES)[number]>>(true);

export const PROTOCOLS = ['llhls', 'webrtc', 'rtsp'] as const satisfies readonly Protocol[];
exhaustive<Exhaustive<Protocol, (typeof PROTOCOLS)[number]>>(true);

export const PROTOCOL_LABELS: Record<Protocol, string> = {
  llhls: 'LL-HLS (browsers, players)',
  webrtc: 'WebRTC (WHEP, sub-second)',
  rtsp: 'RTSP',
};

export const ROLES = ['viewer', 'member', 'admin'] as const satisfies readonly Role[];
exhaustive<Exhaustive<Role, (typeof ROLES)[number]>>(true);

export const ROLE_LABELS: Record<Role, string> = {
  viewer: 'Viewer (reads everything)',
  member: 'Member (also manages streams, VOD, webhooks)',
  admin: 'Admin (also API keys and members)',
};

export const VOD_STATUSES = [
  'pending_upload',
  'uploaded',
  'queued',
  'processing',
  'complete',
  'failed',
  'cancelled',
] as const satisfies readonly VodStatus[];
exhaustive<Exhaustive<VodStatus, (typeof VOD_STATUSES)[number]>>(true);

export const SCOPES_FALLBACK = [
  'streams:read',
  'streams:write',
  'vod:read',
  'vod:write',
  'webhooks:read',
  'webhooks:write',
  'api-keys:read',
  'api-keys:write',
  '*',
] as const satisfies readonly Scope[];
exhaustive<Exhaustive<Scope, (typeof SCOPES_FALLBACK)[number]>>(true);

/** Webhook subscriptions: `*` or an event name (the catalog endpoint has the names too). */
export const EVENT_FILTERS_FALLBACK = [
  'stream.created',
  'stream.live',
  'stream.ended',
  'stream.disabled',
  'stream.input_switched',
  'stream.simulcast.live',
  'stream.simulcast.error',
  'vod.uploaded',
  'vod.processing',
  'vod.complete',
  'vod.failed',
  'vod.cancelled',
] as const satisfies readonly EventFilter[];
