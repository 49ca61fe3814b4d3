-- Accounts: projects, users, memberships, sign-in sessions and API keys.
-- Portable SQL: it runs unchanged on SQLite and Postgres. Timestamps are BIGINT milliseconds
-- since the Unix epoch; identifiers are opaque TEXT.

CREATE TABLE projects (
    id TEXT PRIMARY KEY,
    slug TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE users (
    id TEXT PRIMARY KEY,
    email TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE memberships (
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, user_id)
);

CREATE INDEX memberships_user ON memberships (user_id);

-- Short-lived session tokens (cookie), stored as SHA-256 hashes.
CREATE TABLE sessions (
    token_hash TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    expires_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE INDEX sessions_user ON sessions (user_id);

-- Rotating refresh tokens. A token is used once; presenting a used one again revokes its family.
CREATE TABLE refresh_tokens (
    token_hash TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    family_id TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT,
    created_at BIGINT NOT NULL
);

CREATE INDEX refresh_tokens_family ON refresh_tokens (family_id);

CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    label TEXT NOT NULL,
    prefix TEXT NOT NULL,
    hashed_key TEXT NOT NULL UNIQUE,
    scopes TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT,
    revoked_at BIGINT
);

CREATE INDEX api_keys_project ON api_keys (project_id, created_at);
