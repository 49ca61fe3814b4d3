-- Video on demand: the records, their durable transcode queue, and the server's signing keys.

CREATE TABLE vods (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    filename TEXT NOT NULL,
    output_format TEXT NOT NULL,
    video_codec TEXT NOT NULL,
    audio_codec TEXT NOT NULL,
    aspect_ratio TEXT NOT NULL,
    -- JSON array of the requested rungs ({name, width, height, videoBitrate}).
    ladder TEXT NOT NULL,
    -- pending_upload | uploaded | queued | processing | complete | failed | cancelled
    status TEXT NOT NULL,
    -- Bytes of the source file, once it has landed.
    source_size BIGINT,
    -- Seconds, from the probe.
    duration DOUBLE PRECISION,
    -- JSON of what the probe found (picture size, frame rate, audio), for the transcode.
    source_info TEXT,
    -- JSON array of what was produced ({name, width, height, videoBitrate}).
    renditions TEXT,
    -- 0–100 while processing.
    progress BIGINT NOT NULL,
    error TEXT,
    signed_playback BIGINT NOT NULL,
    -- Until when the upload URL (and session) is valid, ms.
    upload_expires_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    completed_at BIGINT,
    archived_at BIGINT
);

CREATE INDEX vods_project ON vods (project_id, created_at);

-- One row per VOD waiting for or under transcoding; removed when the job ends.
CREATE TABLE transcode_jobs (
    vod_id TEXT PRIMARY KEY REFERENCES vods (id) ON DELETE CASCADE,
    project_id TEXT NOT NULL,
    -- Leases taken so far (a lease that ran out counts as a failed attempt).
    attempts BIGINT NOT NULL,
    lease_owner TEXT,
    lease_until BIGINT,
    created_at BIGINT NOT NULL
);

CREATE INDEX transcode_jobs_due ON transcode_jobs (lease_until, created_at);

-- HMAC keys of signed URLs (uploads; playback tokens). The newest signs; every key verifies,
-- so a new key does not break URLs already handed out.
CREATE TABLE signing_keys (
    kid TEXT PRIMARY KEY,
    secret TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
