-- The audit log (cronq_shared::audit::Entry as JSON), one row per operator action; `at`
-- in ms since the epoch, `job` copied out of the entry for the filter. `id` only grows, so
-- it orders entries recorded in the same millisecond and the oldest are dropped first
-- beyond the cap (crate::audit).
CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    job TEXT,
    entry TEXT NOT NULL
);
CREATE INDEX audit_at ON audit (at);
CREATE INDEX audit_job_at ON audit (job, at);
