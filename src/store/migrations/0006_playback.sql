-- Signed playback and content encryption (drmEnabled).

-- A VOD can be encrypted too (streams already carry drm_enabled).
ALTER TABLE vods ADD COLUMN drm_enabled BIGINT NOT NULL DEFAULT 0;

-- One AES-128 content key per stream or VOD, only ever stored wrapped by the server's master key
-- (which is not in the database).
CREATE TABLE content_keys (
    -- `stream:<id>` or `vod:<id>`
    resource TEXT PRIMARY KEY,
    wrapped TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
