-- Viewers (CONTRACT: Viewers). Each node reports what it counts of each stream (a row per node
-- and stream, replaced at every report); the API sums the fresh rows.
CREATE TABLE viewer_counts (
    node TEXT NOT NULL,
    stream_id TEXT NOT NULL,
    hls BIGINT NOT NULL,
    webrtc BIGINT NOT NULL,
    rtsp BIGINT NOT NULL,
    reported_at BIGINT NOT NULL,
    PRIMARY KEY (node, stream_id)
);

CREATE INDEX viewer_counts_stream ON viewer_counts (stream_id);

-- The most viewers at once of each live session (the channel's session, as recordings keep it),
-- raised by the node holding the push.
CREATE TABLE viewer_peaks (
    stream_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    peak BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    PRIMARY KEY (stream_id, session_id)
);

ALTER TABLE vods ADD COLUMN views BIGINT NOT NULL DEFAULT 0;
ALTER TABLE vods ADD COLUMN watch_seconds DOUBLE PRECISION NOT NULL DEFAULT 0;
