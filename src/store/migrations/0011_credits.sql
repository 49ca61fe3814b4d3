-- Credits (SLUICE_BILLING=on): each project's balance of live time. Kept in milliseconds so
-- that metering in ticks of a few seconds loses nothing to rounding; shown in whole seconds.
-- No row: a balance of zero. Negative: the meter charged past zero before the kill.
CREATE TABLE credits (
    project_id TEXT PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
    balance_ms BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
