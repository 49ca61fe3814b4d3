-- How long a live stream waits for its publisher to come back (seconds, CONTRACT: Continuity).
ALTER TABLE streams ADD COLUMN reconnect_window BIGINT NOT NULL DEFAULT 10;
