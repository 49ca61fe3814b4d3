-- The node registry (docs/scale-out.md): each `sluice serve` process records itself, the
-- address other nodes reach it at (the live relay, WHEP signalling) and a heartbeat. A node
-- whose heartbeat is older than SLUICE_NODE_TIMEOUT is dead to the others: one of them claims
-- it (reaped_at, reaped_by), ends its pushes and completes its recordings. `load` is the JSON
-- the node last reported (live sessions, viewers, CPU).
CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    internal_url TEXT NOT NULL,
    -- Where RTSP viewers reach it (a DESCRIBE on another node is redirected here).
    rtsp_url TEXT,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    load TEXT,
    reaped_at BIGINT,
    reaped_by TEXT
);
CREATE INDEX streams_live_node ON streams (live_node);
