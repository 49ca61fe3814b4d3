-- The wall-clock time (ms) of each recorded segment's first frame, as the live playlist's
-- EXT-X-PROGRAM-DATE-TIME stated it: the recording's playlists carry it, and a clip of a stream by
-- instants finds its range in a recording by it. Null for segments recorded before.
ALTER TABLE recording_segments ADD COLUMN pdt BIGINT;
