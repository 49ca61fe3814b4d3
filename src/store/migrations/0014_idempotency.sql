-- `Idempotency-Key` on POST (CONTRACT: Conventions): the first answer to a key, kept 24 hours
-- and replayed to a repeat of the same request. A row with no status is a request still running.
CREATE TABLE idempotency_keys (
    -- Whose key it is: `project:<id>` for an API key, `user:<id>` for a signed-in user.
    scope TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    -- SHA-256 of the method, the path and query, and the body: "the same request".
    fingerprint TEXT NOT NULL,
    status BIGINT,
    content_type TEXT,
    -- The answer's body with its raw secrets set to null (`redacted` names them).
    body TEXT,
    redacted TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (scope, idempotency_key)
);

CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
