-- Clips (CONTRACT: Clips, downloads, thumbnails): a VOD cut from another VOD or a recording
-- without a re-encode. `clip_of` is JSON of where it came from; its job waits in the one
-- durable queue with `kind` 'clip' (transcodes are 'transcode'), taken by the clip workers of
-- any node, or with `node_id` of that node only (a clip of a live stream's DVR window, which
-- only the node holding the push has).
ALTER TABLE vods ADD COLUMN clip_of TEXT;
ALTER TABLE transcode_jobs ADD COLUMN kind TEXT NOT NULL DEFAULT 'transcode';
ALTER TABLE transcode_jobs ADD COLUMN node_id TEXT;
