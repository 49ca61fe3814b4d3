-- What a live push sends (codec, resolution, frame rate, bitrate), as JSON; NULL when not live.
ALTER TABLE streams ADD COLUMN input_info TEXT;
