-- Webhooks and their delivery outbox. An event is fanned out into one delivery row per subscribed
-- webhook in the same transaction as the state change that caused it; senders lease due rows.

CREATE TABLE webhooks (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    url TEXT NOT NULL,
    description TEXT NOT NULL,
    -- Space-separated event names, or `*`.
    events TEXT NOT NULL,
    enabled BIGINT NOT NULL,
    -- Needed in clear to sign deliveries; shown only in the create response.
    secret TEXT NOT NULL,
    consecutive_failures BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE INDEX webhooks_project ON webhooks (project_id, created_at);

CREATE TABLE webhook_deliveries (
    -- Also the envelope `id` and the X-Service-Delivery header.
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    webhook_id TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event TEXT NOT NULL,
    -- The exact bytes sent on every attempt.
    body TEXT NOT NULL,
    -- pending | success | failed
    status TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    response_code BIGINT,
    error TEXT,
    created_at BIGINT NOT NULL,
    last_attempt_at BIGINT,
    next_attempt_at BIGINT NOT NULL,
    -- Event order across deliveries (first attempts leave in this order).
    seq BIGINT NOT NULL,
    lease_owner TEXT,
    lease_until BIGINT
);

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at, seq);
CREATE INDEX webhook_deliveries_webhook_due ON webhook_deliveries (webhook_id, status, next_attempt_at, seq);
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, created_at);
CREATE INDEX webhook_deliveries_project ON webhook_deliveries (project_id, created_at);
