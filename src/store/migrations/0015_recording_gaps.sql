-- A recorded segment the store did not take (CONTRACT: Faults): noted all the same, so the
-- segments after it keep their index and time, and listed as a gap (`EXT-X-GAP`) in the VOD.
ALTER TABLE recording_segments ADD COLUMN lost BIGINT NOT NULL DEFAULT 0;
