-- Live streams. Push passwords are never stored: `push_verifier` is base64(md5(user + salt +
-- password)), the form OBS's Adobe challenge needs, with a random per-stream salt.

CREATE TABLE streams (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    stream_key TEXT NOT NULL UNIQUE,
    -- Unique: OBS authenticates at connect, before any stream key is known.
    push_username TEXT NOT NULL UNIQUE,
    push_salt TEXT NOT NULL,
    push_verifier TEXT NOT NULL,
    -- Space-separated, e.g. "720p 480p" / "llhls webrtc".
    qualities TEXT NOT NULL,
    protocols TEXT NOT NULL,
    vod_enabled BIGINT NOT NULL,
    dvr_enabled BIGINT NOT NULL,
    dvr_duration BIGINT NOT NULL,
    drm_enabled BIGINT NOT NULL,
    signed_playback BIGINT NOT NULL,
    status TEXT NOT NULL,
    disabled_reason TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    last_push_at BIGINT,
    UNIQUE (project_id, name)
);

CREATE INDEX streams_project ON streams (project_id, created_at);
