-- A stream's simulcast targets (CONTRACT: Simulcast): where the node holding its push sends the
-- publisher's media on. `url` is sealed under the master key; `masked_url` is what the record
-- shows. status, last_error, connected_at and bytes_sent are written by that node as they move.
CREATE TABLE simulcast_targets (
    id TEXT PRIMARY KEY,
    stream_id TEXT NOT NULL REFERENCES streams (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    url TEXT NOT NULL,
    masked_url TEXT NOT NULL,
    enabled BIGINT NOT NULL,
    -- idle | connecting | live | error
    status TEXT NOT NULL,
    last_error TEXT,
    connected_at BIGINT,
    bytes_sent BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE INDEX simulcast_targets_stream ON simulcast_targets (stream_id, created_at);
