-- A stream's own slate picture (CONTRACT: Continuity): the JPEG or PNG uploaded with
-- PUT /streams/<id>/slate, checked at upload. No row: the default card.
CREATE TABLE stream_slates (
    stream_id TEXT PRIMARY KEY,
    content_type TEXT NOT NULL,
    -- SHA-256 of the image, hex: what a rendered slate is kept under.
    digest TEXT NOT NULL,
    width BIGINT NOT NULL,
    height BIGINT NOT NULL,
    size BIGINT NOT NULL,
    image BYTEA NOT NULL,
    updated_at BIGINT NOT NULL
);
