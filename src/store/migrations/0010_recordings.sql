-- Recording live to VOD (CONTRACT: Recording and credits). A recording in progress is a row of
-- `recordings` (its id is the id of the VOD it becomes) and one row per segment written to
-- storage; the VOD row appears, `complete`, when the recording is completed, in the same
-- transaction that removes these rows, so it is completed once even after a crash.
CREATE TABLE recordings (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    stream_id TEXT NOT NULL,
    -- The live session (the channel's session token), continued across reconnects.
    session_id TEXT NOT NULL,
    -- The VOD's name: stream name + ' ' + session start.
    name TEXT NOT NULL,
    drm_enabled BIGINT NOT NULL,
    signed_playback BIGINT NOT NULL,
    -- The node (process data dir) that records it.
    node TEXT NOT NULL,
    -- JSON array of the renditions seen so far (name, kind, sizes, codec).
    renditions TEXT,
    started_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE INDEX recordings_node ON recordings (node);

CREATE TABLE recording_segments (
    recording_id TEXT NOT NULL REFERENCES recordings (id) ON DELETE CASCADE,
    rendition TEXT NOT NULL,
    -- Position in the rendition: the file `s<idx>.m4s` and, encrypted, the AES IV.
    idx BIGINT NOT NULL,
    -- The push generation: a reconnect starts a new one (new init section, a discontinuity).
    generation BIGINT NOT NULL,
    duration DOUBLE PRECISION NOT NULL,
    bytes BIGINT NOT NULL,
    PRIMARY KEY (recording_id, rendition, idx)
);

ALTER TABLE vods ADD COLUMN stream_id TEXT;
ALTER TABLE vods ADD COLUMN session_id TEXT;
CREATE INDEX vods_stream ON vods (stream_id, created_at);
