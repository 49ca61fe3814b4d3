-- The push password itself, sealed under the master key (context `push-secret:<stream id>`):
-- SRT derives its encryption key from the passphrase (PBKDF2), so a verifier is not enough.
-- NULL for streams created before SRT ingest until their push credentials are rotated.
ALTER TABLE streams ADD COLUMN push_secret TEXT;
