-- The event log (CONTRACT: Webhooks, event log): every event of a project, kept 7 days, in the
-- order its transactions committed. `seq` is the project's counter, raised in the event's own
-- transaction as its last write: on Postgres the counter's row stays locked until that commit,
-- so a later number never becomes visible before an earlier one, and a follower reading after a
-- cursor misses nothing (SQLite has one writer at a time anyway).
CREATE TABLE event_counters (
    project_id TEXT PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
    last_seq BIGINT NOT NULL
);

CREATE TABLE events (
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    -- `stream` or `vod`: what the event is about, which decides the scope that may read it.
    kind TEXT NOT NULL,
    event TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    -- The envelope `{id, event, createdAt, data}`, as served.
    body TEXT NOT NULL,
    PRIMARY KEY (project_id, seq)
);

CREATE INDEX events_created ON events (created_at);
