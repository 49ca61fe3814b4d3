-- Downloads (CONTRACT: Clips, downloads, thumbnails): `mp4` 1 asks for a progressive MP4 of each
-- rendition and an M4A, made by a job of kind 'mp4' on the one durable queue once the VOD is
-- complete. `downloads` is JSON of what was made (null until then), `downloads_error` why they
-- could not be.
ALTER TABLE vods ADD COLUMN mp4 BIGINT NOT NULL DEFAULT 0;
ALTER TABLE vods ADD COLUMN downloads TEXT;
ALTER TABLE vods ADD COLUMN downloads_error TEXT;
