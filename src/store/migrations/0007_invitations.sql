-- Invitations of new members (CONTRACT: Users and sessions). Adding a member who has no account
-- creates the account without a password (an empty `password_hash`, which no sign-in matches)
-- and one invitation: a single-use token, valid 7 days, stored only as its SHA-256 hash. The
-- person sets their password by redeeming it.
CREATE TABLE invitations (
    token_hash TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    expires_at BIGINT NOT NULL,
    used_at BIGINT,
    created_at BIGINT NOT NULL
);

CREATE INDEX invitations_user ON invitations (user_id);
